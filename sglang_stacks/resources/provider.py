"""Typed dynamic providers: each resource declares its inputs and outputs as pydantic models, and
its diff rules on the input fields; the base class validates what Pulumi hands over (numbers
arrive as floats: a port stays an int) and computes the diff from the rules.

A field's rule is metadata on its annotation: ``Annotated[str, REPLACES]`` (a change means a new
resource), ``UPDATES`` (changed in place) or ``LABEL`` (recorded, never a change). A rule may
decide by value: the connection replaces only when it names another machine.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar

import pulumi.dynamic as dynamic
from pulumi.output import Unknown
from pulumi.runtime import rpc
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from sglang_stacks.hostops import backend_lock
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.transport import gathering
from sglang_stacks.hostops.transport import tail as tail  # where the providers' messages find it
from sglang_stacks.resources.engine_status import engine_address
from sglang_stacks.resources.provider_errors import sentences_only as _sentences_only
from sglang_stacks.shape import Shape


@dataclass(frozen=True)
class DiffRule:
    """What a changed input means for its resource."""

    kind: Literal["replace", "update", "label"]
    replaces_when: Callable[[Any, Any], bool] | None = None
    """For ``update`` fields: replace after all when this says so, given (old, new) values."""
    unknown_replaces: bool = True
    """For ``replace`` fields: whether a value a preview cannot know yet predicts a replacement."""


REPLACES = DiffRule("replace")
REPLACES_IF_KNOWN = DiffRule("replace", unknown_replaces=False)
"""For an input that another resource's in-place update leaves as it was (the environment's Python
after new emulator code): while a preview cannot know the value it announces no change, since the
declared inputs that would change it (release, runtime, pins) are compared on their own; the
update itself, which knows the value, replaces only if it really changed."""
UPDATES = DiffRule("update")
LABEL = DiffRule("label")


def _other_machine(old: Connection, new: Connection) -> bool:
    # Another host, port, user or kind is another machine (or home folder): the thing is elsewhere.
    # A new key, pinned host key or timeout reaches the same machine.
    return (old.kind, old.host, old.port, old.user) != (new.kind, new.host, new.port, new.user)


CONNECTION = DiffRule("update", replaces_when=_other_machine)
"""The rule of every resource's ``connection``: replaced when it names another machine."""


@dataclass(frozen=True)
class Secret:
    """Marks an input field whose value is a secret in the state."""


SECRET = Secret()

CONNECTION_FIELD = Annotated[Connection, CONNECTION, SECRET]


class Props(Shape):
    """Base of the provider property models: lax about Pulumi's floats, strict about names."""

    model_config = ConfigDict(frozen=True, extra="ignore", arbitrary_types_allowed=True)


class HostInputs(Props):
    """Inputs every host-side resource has: how the host is reached."""

    connection: CONNECTION_FIELD
    """How to reach the host (a secret: it may hold the SSH key); the constructors take the fields of
    a `Connection` as a secret Output (`wiring.host_connection`)."""


InputsT = TypeVar("InputsT", bound=Props)
OutputsT = TypeVar("OutputsT", bound=BaseModel)


def _is_unknown(value: Any) -> bool:
    """Whether a preview value is (or holds) one Pulumi does not know yet."""
    # The provider host hands a preview's unknowns over as `Unknown` objects; the wire form is a
    # sentinel string.
    if isinstance(value, Unknown):
        return True
    if isinstance(value, str):
        return value == rpc.UNKNOWN
    if isinstance(value, Mapping):
        return any(_is_unknown(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_is_unknown(item) for item in value)
    return False


@functools.cache
def field_adapter(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    """Validates and dumps one field of ``model``, with its constraints, validators and serializer."""
    field = model.model_fields[name]
    annotation: Any = field.annotation
    return TypeAdapter(Annotated[annotation, *field.metadata] if field.metadata else annotation)


def _rule(model: type[Props], name: str) -> DiffRule:
    found = [item for item in model.model_fields[name].metadata if isinstance(item, DiffRule)]
    return found[0] if found else UPDATES


def diff_inputs(model: type[Props], olds: Mapping[str, Any], news: Mapping[str, Any]) -> dynamic.DiffResult:
    """The diff of a resource from the rules on its input model's fields.

    Values are compared after validation (``30000.0`` equals ``30000``); a value unknown during a
    preview counts as changed, and replaces only under a ``replace`` rule that says so.
    """
    replaces: list[str] = []
    changed = False
    for name in model.model_fields:
        rule = _rule(model, name)
        # A field missing from the old state was added by a later version of the tool: it is
        # recorded at the next change, and is no reason for one.
        if rule.kind == "label" or name not in news or name not in olds:
            continue
        new_raw, old_raw = news.get(name), olds.get(name)
        if _is_unknown(new_raw):
            if rule.kind == "replace" and not rule.unknown_replaces:
                continue  # decided by the update itself, which knows the value
            changed = True
            if rule.kind == "replace":
                replaces.append(name)
            continue
        adapter = field_adapter(model, name)
        try:
            old, new = adapter.validate_python(old_raw), adapter.validate_python(new_raw)
        except ValidationError:
            old, new = old_raw, new_raw
        if old == new:
            continue
        changed = True
        if rule.kind == "replace" or (
            rule.replaces_when is not None
            and old is not None
            and new is not None
            and rule.replaces_when(old, new)
        ):
            replaces.append(name)
    return dynamic.DiffResult(changes=changed, replaces=replaces, delete_before_replace=True)


class TypedProvider(dynamic.ResourceProvider, Generic[InputsT, OutputsT]):
    """A dynamic provider whose methods see validated models instead of property dicts.

    Subclasses set ``inputs`` and ``outputs`` and implement the typed hooks they need; the
    project's own errors reach the user as their sentence, without a Python traceback.
    """

    inputs: ClassVar[type[Props]]
    outputs: ClassVar[type[BaseModel]]
    stables: ClassVar[tuple[str, ...]] = ()
    """Outputs an update in place never changes: a preview keeps them known for dependents."""
    gathers_with: ClassVar[tuple[str, ...]] = ()
    """The modules of the other providers a refresh of this one's stack reads over the same
    session to a host, imported at its first read so that their reads reach `gathering` within
    milliseconds of it (a refresh reads every resource: each module is needed anyway). Empty for
    a provider that reaches no host over a session (a cluster's)."""

    # -- hooks for subclasses ------------------------------------------------------------------
    def resource_id(self, inputs: InputsT, outputs: OutputsT) -> str:
        """The id Pulumi records for a created resource."""
        return "resource"

    def create_typed(self, inputs: InputsT) -> OutputsT:
        raise NotImplementedError

    def update_typed(self, olds: OutputsT, old_inputs: InputsT, news: InputsT) -> OutputsT:
        """Changes in place; by default the outputs stay as they were."""
        return olds

    def drifted(self, outputs: OutputsT, news: InputsT) -> bool:
        """Whether the recorded outputs (as the last refresh found them) ask for an update although
        no input changed. By default they never do."""
        return False

    def read_typed(self, inputs: InputsT, outputs: OutputsT) -> OutputsT | None:
        """What a refresh finds; ``None`` when the resource is gone. By default: unchanged."""
        return outputs

    def delete_typed(self, inputs: InputsT, outputs: OutputsT) -> None:
        return None

    # -- Pulumi's interface ----------------------------------------------------------------------
    def _inputs(self, props: Mapping[str, Any]) -> InputsT:
        inputs = self.inputs.model_validate(dict(props))
        stack = getattr(inputs, "stack", "")
        if isinstance(stack, str) and engine_address():
            # A CLI killed during this update leaves its lock: this process lets go of it.
            backend_lock.release_when_the_engine_is_gone(stack)
        return inputs  # type: ignore[return-value]

    def _outputs(self, props: Mapping[str, Any]) -> OutputsT:
        return self.outputs.model_validate(dict(props))  # type: ignore[return-value]

    def upgrade(self, props: Mapping[str, Any]) -> dict[str, Any]:
        """State written by an earlier version of the tool, in today's shape (by default as is)."""
        return dict(props)

    def _state(self, inputs: InputsT, outputs: OutputsT) -> dict[str, Any]:
        return {**inputs.model_dump(mode="json"), **outputs.model_dump(mode="json")}

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        with _sentences_only():
            inputs = self._inputs(props)
            outputs = self.create_typed(inputs)
            return dynamic.CreateResult(self.resource_id(inputs, outputs), self._state(inputs, outputs))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        with _sentences_only():
            olds = self.upgrade(olds)
            found = diff_inputs(self.inputs, olds, news)
            if not found.changes:
                try:
                    drifted = self.drifted(self._outputs(olds), self._inputs(news))
                except ValidationError:  # a value still unknown during a preview
                    drifted = False
                found.changes = drifted
            found.stables = list(self.stables) or None
            return found

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        with _sentences_only():
            new_inputs = self._inputs(news)
            olds = self.upgrade(olds)
            outputs = self.update_typed(self._outputs(olds), self._inputs(olds), new_inputs)
            return dynamic.UpdateResult(self._state(new_inputs, outputs))

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        # The other providers a refresh of this stack reads, imported now: see `gathers_with`.
        for module in self.gathers_with:
            importlib.import_module(module)
        with _sentences_only(), gathering():
            props = self.upgrade(props)
            inputs = self._inputs(props)
            found = self.read_typed(inputs, self._outputs(props))
            if found is None:
                return dynamic.ReadResult(None, {})
            return dynamic.ReadResult(id_, self._state(inputs, found))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        with _sentences_only():
            props = self.upgrade(props)
            self.delete_typed(self._inputs(props), self._outputs(props))
