"""A typed resource's constructor and outputs, derived from its provider's models.

A resource's inputs and outputs are declared once, as the pydantic models of its provider
(`TypedProvider.inputs`, `.outputs`). Its constructor takes `Args` of the inputs model: the same
fields, each a value or a Pulumi Output of one (``ServerArgs = args_for(ServerInputs)``, then
``SGLangServer(name, ServerArgs(python=environment.output(lambda o: o.python), ...), opts)``); mypy
checks the field names against the model (and that the required ones are given), values known in
the program are validated against the fields at once, the rest by the provider. Its outputs are
read typed through `TypedResource.output`, which validates each value against its field of the
outputs model: ``server.output(lambda o: o.url)`` is a ``pulumi.Output[str]``. Fields marked
`SECRET` are secrets in the state.

`Args` also carry a component's outputs (`register`, `Args.export`), so the stack outputs are
declared once too, as a model of `sglang_stacks.results.outputs`.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, ParamSpec, TypeVar, cast

import pulumi
import pulumi.dynamic as dynamic
from pydantic import BaseModel, TypeAdapter

from sglang_stacks.resources.provider import SECRET, Props, TypedProvider, field_adapter

__all__ = ["Args", "TypedResource", "args_for", "register"]

ModelT = TypeVar("ModelT", bound=BaseModel)
InputsT = TypeVar("InputsT", bound=Props)
OutputsT = TypeVar("OutputsT", bound=BaseModel)
P = ParamSpec("P")
T = TypeVar("T")


def _deferred(value: object) -> bool:
    """Whether ``value`` is (or holds) an Output: known only when the engine has resolved it."""
    if isinstance(value, pulumi.Output | Awaitable):
        return True
    if isinstance(value, Mapping):
        return any(_deferred(item) for item in value.values())
    return isinstance(value, list | tuple) and any(_deferred(item) for item in value)


def _dumped(adapter: TypeAdapter[Any], value: object) -> Any:
    """``value`` as its field records it, JSON-ready (validated first: it may be another
    resource's raw output)."""
    return adapter.dump_python(adapter.validate_python(value), mode="json")


class _FieldName:
    """Stands in for a model where a lambda names one of its fields: says which field was read."""

    def __getattr__(self, name: str) -> str:
        return name


def _picked(model: type[BaseModel], pick: Callable[[Any], object]) -> str:
    """The field of ``model`` that ``pick`` reads (``lambda o: o.url`` reads ``url``)."""
    name = pick(_FieldName())
    if not isinstance(name, str) or name not in model.model_fields:
        raise TypeError(
            f"pick one field of {model.__name__}, as in `lambda o: o.{next(iter(model.model_fields))}`"
        )
    return name


class Args(Generic[ModelT]):
    """The fields of ``model`` as Pulumi takes them: each a value, or an Output of one."""

    def __init__(self, model: type[ModelT], values: Mapping[str, object]) -> None:
        unknown = sorted(set(values) - set(model.model_fields))
        if unknown:
            raise TypeError(f"{model.__name__} has no field {', '.join(unknown)}")
        self.model = model
        self.values: dict[str, object] = {}
        for name, field in model.model_fields.items():
            if name in values:
                value = values[name]
                # Known now: checked now, so bad input stops the program before anything deploys.
                known = not _deferred(value)
                self.values[name] = field_adapter(model, name).validate_python(value) if known else value
            elif field.is_required():
                raise TypeError(f"{model.__name__} needs {name}")
            else:
                self.values[name] = field.get_default(call_default_factory=True)

    def get(self, pick: Callable[[ModelT], T]) -> T:
        """A field's value as given, when it is known in the program: ``pick`` names the field
        (``lambda i: i.sha256``). TypeError for one that is an Output."""
        name = _picked(self.model, pick)
        value = self.values[name]
        if _deferred(value):
            raise TypeError(f"{self.model.__name__}.{name} is an Output: its value is known only later")
        return cast(T, value)

    def props(self) -> dict[str, Any]:
        """The values as Pulumi records them: JSON-ready, the models as their fields."""
        props: dict[str, Any] = {}
        for name, value in self.values.items():
            adapter = field_adapter(self.model, name)
            if _deferred(value):
                props[name] = pulumi.Output.from_input(value).apply(functools.partial(_dumped, adapter))
            else:
                props[name] = adapter.dump_python(value, mode="json")
        return props

    def output(self, pick: Callable[[ModelT], T]) -> pulumi.Output[T]:
        """A field as an Output, known or not: ``pick`` names it (``lambda o: o.tok_s``)."""
        return pulumi.Output.from_input(self.values[_picked(self.model, pick)])  # type: ignore[arg-type]

    def export(self) -> None:
        """Exports each field as a stack output of the same name (``__main__.py`` does, for the
        outputs of the stack's deployment or fleet)."""
        for name, value in self.props().items():
            pulumi.export(name, value)

    def secret_fields(self) -> list[str]:
        """The fields marked `SECRET`."""
        return [name for name, field in self.model.model_fields.items() if SECRET in field.metadata]


def args_for(model: Callable[P, ModelT]) -> Callable[P, Args[ModelT]]:
    """The constructor of ``model``'s `Args`: its keyword arguments are ``model``'s fields."""
    model_class = cast(type[ModelT], model)

    def build(*args: P.args, **kwargs: P.kwargs) -> Args[ModelT]:
        if args:
            raise TypeError(f"{model_class.__name__} args are keyword arguments")
        return Args(model_class, kwargs)

    build.__signature__ = inspect.signature(model_class)  # type: ignore[attr-defined]
    build.__doc__ = f"`Args` of {model_class.__name__}: its fields, each a value or an Output of one."
    # It belongs to the module that makes it (``BenchmarkArgs`` is the benchmark's), as a class would.
    build.__module__ = sys._getframe(1).f_globals.get("__name__", build.__module__)
    return build


class TypedResource(dynamic.Resource, Generic[InputsT, OutputsT]):
    """A dynamic resource built from `Args` of its provider's inputs model, its outputs read typed."""

    def __init__(
        self,
        provider: TypedProvider[InputsT, OutputsT],
        name: str,
        args: Args[InputsT],
        opts: pulumi.ResourceOptions | None = None,
        *,
        known: Mapping[str, pulumi.Input[Any]] | None = None,
    ) -> None:
        """``known`` gives outputs their value before the provider runs (a digest computed here)."""
        self._models = (provider.inputs, provider.outputs)
        # Every output is registered unknown, so it is an attribute of the resource at once.
        props = {**args.props(), **dict.fromkeys(provider.outputs.model_fields), **(known or {})}
        secrets = pulumi.ResourceOptions(additional_secret_outputs=args.secret_fields())
        super().__init__(provider, name, props, pulumi.ResourceOptions.merge(opts, secrets))

    def output(self, pick: Callable[[OutputsT], T]) -> pulumi.Output[T]:
        """One output, typed as its field of the outputs model: ``pick`` names it
        (``lambda o: o.url``)."""
        return self._typed(self._models[1], _picked(self._models[1], pick))

    def outputs(self) -> pulumi.Output[OutputsT]:
        """Every output, as one value of the outputs model."""
        model = self._models[1]
        fields = {name: self._typed(model, name) for name in model.model_fields}
        return pulumi.Output.all(**fields).apply(lambda found: cast(OutputsT, model.model_validate(found)))

    def input(self, pick: Callable[[InputsT], T]) -> pulumi.Output[T]:
        """One input as the resource recorded it, typed as its field of the inputs model."""
        return self._typed(self._models[0], _picked(self._models[0], pick))

    def _typed(self, model: type[BaseModel], name: str) -> pulumi.Output[Any]:
        adapter = field_adapter(model, name)
        raw: pulumi.Output[Any] = getattr(self, name)
        return raw.apply(adapter.validate_python)


def register(component: pulumi.ComponentResource, outputs: Args[Any]) -> None:
    """Registers ``outputs`` as the outputs of ``component``."""
    component.register_outputs(outputs.props())
