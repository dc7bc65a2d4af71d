"""Loading a storage or metadata manager plugin by the class name its broker setting gives."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping

from tierlog.errors import InvalidConfigError


def load_plugin_class(class_name: str, builtins: Mapping[str, str], base: type, class_path: str | None = None,
                      hint: str = "") -> type:
    """Resolve a built-in short name, ``package.module:Class`` or ``package.module.Class`` to a subclass
    of ``base``. ``class_path`` (``remote.log.*.class.path``) lists folders, os.pathsep-separated,
    searched before the usual import path."""
    what = base.__name__
    target = builtins.get(class_name.strip(), class_name.strip())
    module_name, sep, attr = target.partition(":")
    if not sep:
        module_name, _, attr = target.rpartition(".")
    if not module_name or not attr:
        raise InvalidConfigError(f"{what} {class_name!r} is neither one of {', '.join(builtins)} nor a "
                                 f"package.module:Class path")
    for folder in reversed((class_path or "").split(os.pathsep)):
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise InvalidConfigError(f"cannot load {what} {class_name!r}: {e}{hint}") from None
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise InvalidConfigError(f"{target} is not a {what} subclass")
    return cls
