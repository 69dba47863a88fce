"""Opens the built documentation site in real headless chromium and checks that pages render.

    python scripts/docs_browser_check.py --site site --out docs-screenshots [--chromium /usr/bin/chromium]

Serves ``--site`` on a local port, starts Debian's chromium headless with a fresh, empty profile and no network
extras, drives it over the DevTools protocol (a websocket, ``websocket-client`` from the ``docs`` extra) and, for
the home page and one API page:

* waits for the load event and for the page's content (a heading and the text it must hold);
* collects every console error, uncaught exception and failed resource load (the ``Log`` and ``Runtime`` domains);
* saves a screenshot to ``--out`` (kept as a test artefact).

Exits 1, naming the page and the problem, if a page did not render its content or logged an error.
"""

from __future__ import annotations

import argparse
import base64
import functools
import http.server
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--window-size=1280,1000"]

# (name, path in the site, text the rendered page must show, an element that must exist)
PAGES = [
    ("home", "", ["Exact, fast k-nearest neighbours", "Where to go"], "article h1"),
    ("api-pcgeom", "api/pcgeom/", ["pcgeom.knn", "query_lengths", "Returns"], '[id="pcgeom.knn"]'),
]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(site: Path):
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


class DevTools:
    def __init__(self, ws_url: str):
        import websocket  # websocket-client

        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, **params):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"DevTools {method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_for(self, method: str, timeout: float):
        end = time.monotonic() + timeout
        start = len(self.events)
        while time.monotonic() < end:
            if any(e["method"] == method for e in self.events[start:]):
                return True
            self.ws.settimeout(max(0.1, end - time.monotonic()))
            try:
                msg = json.loads(self.ws.recv())
            except Exception:
                break
            if "method" in msg:
                self.events.append(msg)
        return any(e["method"] == method for e in self.events[start:])

    def drain(self, seconds: float):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.ws.settimeout(max(0.05, end - time.monotonic()))
            try:
                msg = json.loads(self.ws.recv())
            except Exception:
                continue
            if "method" in msg:
                self.events.append(msg)

    def evaluate(self, expression: str):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return r.get("result", {}).get("value")


def errors_in(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        m, p = e["method"], e.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console." + p["type"] + ": " + " ".join(str(a.get("value", a.get("description", "")))
                                                              for a in p.get("args", [])))
        elif m == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            out.append("uncaught: " + str(d.get("exception", {}).get("description") or d.get("text")))
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            entry = p["entry"]
            out.append(f"log: {entry.get('text')} {entry.get('url', '')}".strip())
    return out


def start_chromium(chromium: str, profile: Path):
    proc = subprocess.Popen([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port_file = profile / "DevToolsActivePort"
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if port_file.is_file() and port_file.read_text().strip():
            port = int(port_file.read_text().split()[0])
            return proc, port
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with status {proc.returncode}: {proc.stderr.read()[-2000:]}")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("chromium did not open its DevTools port within 60 s")


def check(site: Path, out: Path, chromium: str) -> list[str]:
    problems = []
    out.mkdir(parents=True, exist_ok=True)
    server, base = serve(site)
    profile = Path(tempfile.mkdtemp(prefix="pcgeom-chromium-"))
    proc = None
    try:
        proc, port = start_chromium(chromium, profile)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as r:
            targets = json.load(r)
        page = next(t for t in targets if t.get("type") == "page")
        dt = DevTools(page["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log", "Network"):
            dt.call(f"{domain}.enable")
        dt.call("Emulation.setDeviceMetricsOverride", width=1280, height=1000, deviceScaleFactor=1, mobile=False)
        for name, path, texts, selector in PAGES:
            dt.events.clear()
            url = base + path
            dt.call("Page.navigate", url=url)
            if not dt.wait_for("Page.loadEventFired", 60):
                problems.append(f"{name} ({url}): no load event within 60 s")
            # let scripts (search worker, palette, code copy buttons) run and report
            end = time.monotonic() + 20
            found = False
            while time.monotonic() < end:
                found = bool(dt.evaluate(f"!!document.querySelector({json.dumps(selector)})"))
                if found:
                    break
                dt.drain(0.25)
            dt.drain(1.5)
            body = dt.evaluate("document.body ? document.body.innerText : ''") or ""
            title = dt.evaluate("document.title") or ""
            if not found:
                problems.append(f"{name} ({url}): no element {selector}")
            for t in texts:
                if t not in body:
                    problems.append(f"{name} ({url}): the rendered page does not show {t!r}")
            for err in errors_in(dt.events):
                problems.append(f"{name} ({url}): {err}")
            shot = dt.call("Page.captureScreenshot", format="png")
            png = out / f"{name}.png"
            png.write_bytes(base64.b64decode(shot["data"]))
            print(f"{name}: {url} title={title!r}, {len(body)} characters of text, screenshot {png}")
        dt.ws.close()
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, default=Path("site"), help="the built site (mkdocs build)")
    ap.add_argument("--out", type=Path, default=Path("docs-screenshots"), help="folder for the screenshots")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = ap.parse_args(argv)
    if not (args.site / "index.html").is_file():
        print(f"ERROR: {args.site} holds no built site (run mkdocs build first)", file=sys.stderr)
        return 1
    if not Path(args.chromium).exists():
        print(f"ERROR: no chromium at {args.chromium} (apt-get install chromium)", file=sys.stderr)
        return 1
    problems = check(args.site, args.out, args.chromium)
    print(f"screenshots in {args.out.resolve()}")
    for p in problems:
        print("ERROR:", p, file=sys.stderr)
    print("browser check: " + ("passed" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
