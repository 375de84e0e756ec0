"""The inert object that stands in for anything a missing package would have provided.

It can be called, subscripted, iterated, subclassed and used as a decorator, so a release's
modules import with it; every question put to it (``bool``, ``len``, iteration, comparison)
is answered false, empty or zero, as on a machine without a GPU, and recorded while
``questions()`` is on, so that a parser shaped by such an answer is refused.
"""

from __future__ import annotations

import abc
import sys
import types
from collections.abc import Iterator
from typing import Any

__all__ = ["MARKER", "PLUGIN_ATTRIBUTES", "PYTHON_DUNDERS", "Inert", "is_inert", "questions"]

MARKER = "__stand_in__."
"""How a stand-in's text begins, so that a string made from one is recognised too."""

# Attributes torch gains only when a vendor's plugin package is installed. Releases probe them
# with ``hasattr`` to pick a platform (and raise when one is there but its device is not).
PLUGIN_ATTRIBUTES = frozenset({"npu", "hpu", "musa", "mlu"})

# Python's own special names fail on a stand-in as on a plain object, so that copy, pickle,
# inspect and typing do not mistake it for something it is not. A library's dunders
# (``__version__``, pydantic's ``__class_validators__``) are stand-ins like any attribute.
PYTHON_DUNDERS = frozenset(
    name
    for kind in (type, types.FunctionType, types.ModuleType, property, list, dict)
    for name in dir(kind)
    if name.startswith("__")
) | frozenset(
    {
        "__wrapped__",
        "__signature__",
        "__origin__",
        "__args__",
        "__parameters__",
        "__set_name__",
        "__get__",
        "__set__",
        "__delete__",
        "__fspath__",
        "__length_hint__",
        "__copy__",
        "__deepcopy__",
        "__getnewargs__",
        "__getnewargs_ex__",
        "__getstate__",
        "__setstate__",
        "__dataclass_fields__",
        "__dataclass_params__",
        "__all__",
        "__path__",
        "__file__",
        "__spec__",
        "__loader__",
        "__package__",
        "__isabstractmethod__",
        "__abstractmethods__",
        "__objclass__",
        "__text_signature__",
        "__await__",
        "__aiter__",
        "__anext__",
        "__typing_subst__",
        "__typing_unpacked_tuple_args__",
        "__typing_is_unpacked_typevartuple__",
        "__orig_bases__",
        "__orig_class__",
        "__supertype__",
        "__forward_arg__",
        "__slots__",
        "__weakref__",
        "__mro_entries__",
        "__class_getitem__",
        "__buffer__",
        "__release_buffer__",
    }
)

_asked: list[str] | None = None


def questions() -> list[str]:
    """Start recording the questions put to stand-ins; the returned list fills as they come."""
    global _asked
    _asked = []
    return _asked


def _answer(stand_in: Inert, question: str) -> None:
    if _asked is not None:
        caller = sys._getframe(2)
        where = f"{caller.f_code.co_filename}:{caller.f_lineno}"
        _asked.append(f"{question} of {stand_in!r} at {where}")


class _InertMeta(abc.ABCMeta):
    """Classes built on a stand-in answer class-level lookups too (``Model.model_rebuild()``).

    Derived from ``ABCMeta`` so that a release's class may mix a stand-in base with ``ABC``.
    """

    def __getattr__(cls, name: str) -> Any:
        if name in PYTHON_DUNDERS:
            raise AttributeError(name)
        return Inert(f"{cls.__name__}.{name}")


class _InertBase(metaclass=_InertMeta):
    """The base a release's class gets in place of a stand-in base (``torch.nn.Module``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __init_subclass__(cls, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name in PYTHON_DUNDERS:
            raise AttributeError(name)
        return Inert(f"{type(self).__name__}().{name}")


_bases: dict[str, type] = {}


class Inert(str):
    """An object standing in for anything a missing package would have provided.

    It is a ``str`` only so that Python accepts it where a name is required
    (``getattr(torch, device)``). Its text is a marker, ``__stand_in__.torch.cuda`` (a Python
    expression, as ``typing`` wants of a string annotation), and every method, string methods
    included, answers with another stand-in, so nothing derived from it passes for a real value.
    """

    def __new__(cls, name: str) -> Inert:
        self = super().__new__(cls, f"{MARKER}{name}")
        object.__setattr__(self, "_name", name)
        return self

    def __getattribute__(self, name: str) -> Any:
        if name == "_name" or (name.startswith("__") and name.endswith("__")):
            return object.__getattribute__(self, name)
        if name in PLUGIN_ATTRIBUTES:
            raise AttributeError(name)
        return Inert(f"{object.__getattribute__(self, '_name')}.{name}")

    def __getattr__(self, name: str) -> Inert:
        # Reached only for dunders the class lacks.
        if name in PYTHON_DUNDERS:
            raise AttributeError(name)
        return Inert(f"{self._name}.{name}")

    def __setattr__(self, name: str, value: Any) -> None:
        pass  # a release may set attributes on a stand-in (``torch.backends.x = ...``): nothing to keep

    def __repr__(self) -> str:
        return f"<stand-in {self._name}>"

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__str__(self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Called with one function, a stand-in is taken for a bare decorator and hands it back, so a
        # release's own functions stay real (``@triton.jit``, ``@torch.compile``).
        if len(args) == 1 and not kwargs and isinstance(args[0], types.FunctionType):
            return args[0]
        return Inert(f"{self._name}()")

    def __getitem__(self, key: Any) -> Inert:
        return Inert(f"{self._name}[...]")

    def __setitem__(self, key: Any, value: Any) -> None:
        pass  # ``CONFIG_MAPPING._extra_content["lfm2"] = ...``: nothing to keep

    def __delitem__(self, key: Any) -> None:
        pass

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        base = _bases.get(self._name)
        if base is None:
            base = _bases[self._name] = type(self._name.rsplit(".", 1)[-1], (_InertBase,), {})
        return (base,)

    def __bool__(self) -> bool:
        _answer(self, "truth")
        return False

    def __len__(self) -> int:
        _answer(self, "length")
        return 0

    def __iter__(self) -> Iterator[Any]:
        _answer(self, "iteration")
        return iter(())

    def __contains__(self, item: Any) -> bool:
        _answer(self, "membership")
        return False

    def __int__(self) -> int:
        _answer(self, "number")
        return 0

    __index__ = __int__

    def __float__(self) -> float:
        _answer(self, "number")
        return 0.0

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        _answer(self, "comparison")
        return other is self

    def __ne__(self, other: object) -> bool:
        _answer(self, "comparison")
        return other is not self

    def __lt__(self, other: object) -> bool:
        _answer(self, "comparison")
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def __enter__(self) -> Inert:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _arithmetic(self, *other: Any) -> Inert:
        return Inert(f"{self._name}.__op__()")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _arithmetic
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _arithmetic
    __pow__ = __rpow__ = __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _arithmetic
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = __neg__ = __pos__ = __invert__ = _arithmetic
    __matmul__ = __rmatmul__ = _arithmetic


def is_inert(value: Any) -> bool:
    """Whether ``value`` is a stand-in, a string made from one, or a class built on one."""
    if isinstance(value, Inert | _InertBase):
        return True
    if isinstance(value, str):
        return MARKER in value
    return isinstance(value, type) and issubclass(value, _InertBase)
