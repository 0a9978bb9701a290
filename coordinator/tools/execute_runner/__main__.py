"""The runner process's entry point: ``python -I <this folder> <fd>``.

Python runs this file with the folder first on ``sys.path`` and no package around it. The runner's
package is loaded from the folder under the name ``execute_runner``, so that its modules import one
another without importing ``coordinator`` (and every dependency of it), and the folder is taken off
``sys.path`` again: with ``-I`` no folder of the coordinator's is the script's to import from.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types

PACKAGE = "execute_runner"


def _load_package() -> types.ModuleType:
    folder = os.path.dirname(os.path.realpath(__file__))
    if sys.path and os.path.realpath(sys.path[0]) == folder:
        del sys.path[0]
    spec = importlib.util.spec_from_file_location(
        PACKAGE, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    spec.loader.exec_module(package)
    return package


if __name__ == "__main__":
    _load_package().main(sys.argv)
