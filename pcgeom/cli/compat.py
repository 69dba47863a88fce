"""``pcgeom compat enable|disable|status``: the opt-in import shims for this Python environment.

The names in the help and in what ``enable`` prints come from the shim table
(:data:`pcgeom.compat.shims.SHIMS`), so they cannot drift from what the hook serves.
"""

from __future__ import annotations

import sys

from pcgeom.cli.common import path_arg
from pcgeom.compat import shims

# PyG's optional compiled companions: torch_geometric imports each when installed and takes its
# knn / radius / fps / scatter from it, so serving one of these names changes what PyG computes with.
_PYG_COMPANIONS = ("pyg_lib", "torch_cluster", "torch_scatter", "torch_sparse", "torch_spline_conv")


def served_names() -> str:
    """Every module name the hook serves, one entry per top-level name with its submodules, e.g.
    ``"pointnet2_ops (+ .pointnet2_modules, .pointnet2_utils)"``."""
    tops: dict[str, list[str]] = {}
    for name in sorted(shims.SHIMS):
        top, _, rest = name.partition(".")
        tops.setdefault(top, [])
        if rest:
            tops[top].append("." + rest)
    return ", ".join(top + (f" (+ {', '.join(subs)})" if subs else "") for top, subs in tops.items())


def pyg_names() -> list[str]:
    """The served top-level names that PyG (torch_geometric) imports when present."""
    return sorted({n.split(".")[0] for n in shims.SHIMS} & set(_PYG_COMPANIONS))


_TOPS = sorted({n.split(".")[0] for n in shims.SHIMS})
HELP = f"turn the import shims ({', '.join(_TOPS)}) on or off for this Python environment"
DESCRIPTION = (
    f"enable: every later Python process of this environment serves these {len(shims.SHIMS)} module names from "
    f"pcgeom wherever the real extension is not installed (a real one always wins), until `disable`: "
    f"{served_names()}. This also changes what every other importer of those names gets, PyG "
    f"(torch_geometric, 2.8 included) among them: it imports {', '.join(pyg_names())} when present and then "
    "computes its knn, radius, fps and scatter with the stand-ins. enable writes pcgeom-shims.pth and "
    "_pcgeom_shim_hook.py into site-packages (or --site-dir; a folder this Python does not read at start-up "
    "is written with a warning that it serves nothing here); nothing is imported at start-up until a shimmed "
    "name is; PCGEOM_DISABLE_SHIMS=1 turns the hook off for one process. disable removes the two files. "
    "status: shows the setting and, per name, whether a real extension was found."
)


def add_arguments(p) -> None:
    p.add_argument("action", choices=["enable", "disable", "status"])
    p.add_argument("--site-dir", type=path_arg, default=None, help="site-packages folder to write to (default: this environment's)")


def _not_read_here(site_dir) -> str:
    dirs = ", ".join(map(str, shims.start_up_site_dirs()))
    return (f"this Python ({sys.executable}) does not read {site_dir} at start-up (it runs the .pth files of "
            f"{dirs}), so the hook there serves nothing to it; only an interpreter whose site-packages is "
            f"{site_dir} serves these names")


def run(args) -> int:
    where = shims.site_dir_of(args.site_dir)
    read_here = shims.is_start_up_site_dir(args.site_dir)
    if args.action == "enable":
        try:
            pth = shims.install_hook(args.site_dir)
        except OSError as exc:
            print(f"pcgeom compat enable: cannot write the hook into {where}: {exc}. "
                  "Use a virtual environment you can write to, pass --site-dir, or call "
                  "pcgeom.compat.enable_shims() in the program instead.", file=sys.stderr)
            return 1
        if not read_here:
            print(f"pcgeom compat enable: wrote the hook into {where} ({pth.name}), but {_not_read_here(where)}.",
                  file=sys.stderr)
            return 0
        print(f"pcgeom import shims enabled for this Python environment ({pth}).")
        print(f"Every later process of {sys.executable} serves these names where no real extension is installed:")
        print("  " + served_names())
        pyg = pyg_names()
        if pyg:
            print(f"This also changes what every other program here gets from {', '.join(pyg)}: PyG "
                  "(torch_geometric, 2.8 included) imports them when present and then runs its knn, radius, fps "
                  "and scatter on these stand-ins. PCGEOM_DISABLE_SHIMS=1 turns the hook off for one process.")
        print("Run the repository's own command now; `pcgeom compat disable` undoes this.")
        return 0
    if args.action == "disable":
        try:
            gone = shims.uninstall_hook(args.site_dir)
        except OSError as exc:
            print(f"pcgeom compat disable: cannot remove the hook from {where}: {exc}. The shims stay enabled "
                  "there; ask whoever can write that folder to run `pcgeom compat disable`, or set "
                  "PCGEOM_DISABLE_SHIMS=1 to turn them off for one process.", file=sys.stderr)
            return 1
        scope = "for this Python environment" if read_here else f"in {where}"
        print(f"pcgeom import shims disabled {scope}"
              + (f" (removed {', '.join(map(str, gone))})." if gone else " (they were not enabled)."))
        return 0
    hook = shims.hook_status(args.site_dir)
    print(f"pcgeom import shims: {'enabled' if hook['installed'] else 'disabled'} in {hook['site_dir']}"
          + ("" if hook["current"] or not hook["installed"] else " (stale: run `pcgeom compat enable` again)"))
    if not read_here:
        print(f"  note: {_not_read_here(where)}")
    for name, st in shims.shim_status().items():
        if st["real"]:
            where_ = f"real extension: {st['real']}"
        elif hook["installed"] and read_here:
            where_ = f"shim: {st['target']}"
        else:
            where_ = f"not installed (`pcgeom compat enable` would serve {st['target']})"
        print(f"  {name:<31} {where_}")
    return 0
