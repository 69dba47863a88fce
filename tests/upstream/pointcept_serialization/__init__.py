# added, not upstream: Pointcept's pointcept/models/utils/serialization package, vendored unchanged once in
# ../pointcept (for the PTv3 run), loaded from there on its own; importing it through pointcept.models would
# pull in the models and their shimmed extensions.
import importlib.util as _util
import os as _os
import sys as _sys

_HERE = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))), "pointcept", "pointcept",
                      "models", "utils", "serialization")
_spec = _util.spec_from_file_location(__name__ + "._vendored", _os.path.join(_HERE, "__init__.py"),
                                      submodule_search_locations=[_HERE])
_mod = _util.module_from_spec(_spec)
_sys.modules[_spec.name] = _mod
_spec.loader.exec_module(_mod)

encode, decode = _mod.encode, _mod.decode
z_order_encode, z_order_decode = _mod.z_order_encode, _mod.z_order_decode
hilbert_encode, hilbert_decode = _mod.hilbert_encode, _mod.hilbert_decode
