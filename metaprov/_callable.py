"""Packages that are also a public function of the same name (``metaprov.write``, ``metaprov.crate``).

Importing a subpackage binds the module, not the lazy API function, to the parent's attribute, so
after ``import metaprov.write.output`` the name ``metaprov.write`` is the package. Making such a
package callable keeps ``metaprov.write(graph, path)`` working whatever was imported before.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(self, self.__name__.rpartition(".")[2])(*args, **kwargs)


def make_callable(module_name: str) -> None:
    """Let the package ``module_name`` be called as its function of the same last name."""
    sys.modules[module_name].__class__ = _CallableModule
