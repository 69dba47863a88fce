"""``pcgeom compat enable|disable|status``: the opt-in import shims for this Python environment."""

from __future__ import annotations

import sys

HELP = "turn the import shims (knn_cuda, pointnet2_ops, chamfer) on or off for this Python environment"
DESCRIPTION = (
    "enable: every later Python process of this environment serves knn_cuda, pointnet2_ops "
    "(+ .pointnet2_utils, .pointnet2_modules) and chamfer from pcgeom wherever the real extension is not "
    "installed (a real one always wins), until `disable`. It writes pcgeom-shims.pth and "
    "_pcgeom_shim_hook.py into site-packages; nothing is imported at start-up until a shimmed name is. "
    "status: shows the setting and, per name, whether a real extension was found."
)


def add_arguments(p) -> None:
    p.add_argument("action", choices=["enable", "disable", "status"])
    p.add_argument("--site-dir", default=None, help="site-packages folder to write to (default: this environment's)")


def run(args) -> int:
    from pcgeom.compat import shims

    if args.action == "enable":
        try:
            pth = shims.install_hook(args.site_dir)
        except OSError as exc:
            print(f"pcgeom compat enable: cannot write the hook into {shims.site_dir_of(args.site_dir)}: {exc}. "
                  "Use a virtual environment you can write to, pass --site-dir, or call "
                  "pcgeom.compat.enable_shims() in the program instead.", file=sys.stderr)
            return 1
        print(f"pcgeom import shims enabled for this Python environment ({pth}).")
        print("Every later process serves these names where no real extension is installed:")
        print("  " + ", ".join(sorted(shims.SHIMS)))
        print("Run the repository's own command now; `pcgeom compat disable` undoes this.")
        return 0
    if args.action == "disable":
        gone = shims.uninstall_hook(args.site_dir)
        print("pcgeom import shims disabled for this Python environment" + (f" (removed {', '.join(map(str, gone))})." if gone else " (they were not enabled)."))
        return 0
    hook = shims.hook_status(args.site_dir)
    print(f"pcgeom import shims: {'enabled' if hook['installed'] else 'disabled'} in {hook['site_dir']}"
          + ("" if hook["current"] or not hook["installed"] else " (stale: run `pcgeom compat enable` again)"))
    for name, st in shims.shim_status().items():
        if st["real"]:
            where = f"real extension: {st['real']}"
        elif hook["installed"]:
            where = f"shim: {st['target']}"
        else:
            where = f"not installed (`pcgeom compat enable` would serve {st['target']})"
        print(f"  {name:<31} {where}")
    return 0
