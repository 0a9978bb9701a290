"""The one ``cattrs`` converter shared by the API, the store and events.

Fields whose value equals their default are left out of the wire form, so optional fields of the
contract (``decision?``, ``partial?``) are absent rather than null; a field that the contract shows as
``null`` when empty (``claim``, ``last_outcome``) has no default and is always present.

Classes that carry a ``type`` class variable (stop reasons, message parts) always write it, and their
unions are structured by it: the contract's own tag.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cattrs
from cattrs.gen import make_dict_unstructure_fn

from coordinator import reasons, records, statuses

converter = cattrs.Converter(omit_if_default=True, forbid_extra_keys=True)

# A record's stored status (a str enum) is its plain word on the wire, as the Literal it stands for.
for _status in (statuses.PermissionStatus, statuses.FormStatus):
    converter.register_unstructure_hook(_status, lambda status: status.value)


def _register_tagged(classes: tuple[type[Any], ...], union: Any) -> None:
    by_tag = {cls.type: cls for cls in classes}
    for cls in classes:
        converter.register_unstructure_hook(cls, _tagged_unstructure(cls))

    def structure_union(data: Any, _: Any) -> Any:
        if not isinstance(data, dict) or data.get("type") not in by_tag:
            raise ValueError(f"expected an object with type in {sorted(by_tag)}")
        body = {k: v for k, v in data.items() if k != "type"}
        return converter.structure(body, by_tag[data["type"]])

    converter.register_structure_hook(union, structure_union)
    converter.register_structure_hook(
        union | None, lambda data, _: None if data is None else structure_union(data, union)
    )


def _tagged_unstructure(cls: type[Any]) -> Callable[[Any], dict[str, Any]]:
    fields_of = make_dict_unstructure_fn(cls, converter, _cattrs_omit_if_default=True)

    def unstructure_tagged(value: Any) -> dict[str, Any]:
        return {"type": cls.type, **fields_of(value)}

    return unstructure_tagged


_register_tagged(reasons.REASON_CLASSES, reasons.StopReason)
_register_tagged((records.TextPart, records.ToolPart), records.TextPart | records.ToolPart)


def unstructure(value: Any) -> Any:
    """The JSON-able wire form of a record, a reason or an event payload."""
    return converter.unstructure(value)


def structure(data: Any, cls: Any) -> Any:
    """Build ``cls`` from its wire form; raises ``cattrs`` errors on a mismatch."""
    return converter.structure(data, cls)
