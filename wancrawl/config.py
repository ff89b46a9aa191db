"""Typed TOML settings: dataclasses with defaults, strict keys, validation and CLI overrides."""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from wancrawl.errors import ConfigError

T = TypeVar("T")


def read_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file; a missing file or a syntax error becomes a ConfigError naming it."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {p} not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {p}: {exc}") from None


def build(cls: type[T], data: dict[str, Any] | None, *, where: str = "", source: str = "config") -> T:
    """Build dataclass `cls` from a dict, checking every key and type.

    `where` is the dotted prefix of this table (for messages), `source` the file name.
    Unknown keys are errors that name the key and list the known ones.
    """
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        attr = key.replace("-", "_")
        if attr not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"{source}: unknown key '{where}{key}' (known keys here: {known})")
        kwargs[attr] = _coerce(hints[attr], value, f"{where}{key}", source)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {where or 'top level'}: {exc}") from None


def _coerce(tp: Any, value: Any, key: str, source: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(inner[0], value, key, source)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: '{key}' must be a table, got {type(value).__name__}")
        return build(tp, value, where=f"{key}.", source=source)
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise ConfigError(f"{source}: '{key}' must be a list, got {type(value).__name__}")
        item_tp = args[0] if args else Any
        items = [_coerce(item_tp, v, f"{key}[{i}]", source) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: '{key}' must be a table, got {type(value).__name__}")
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _coerce(vt, v, f"{key}.{k}", source) for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{source}: '{key}' must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{source}: '{key}' must be an integer, got {value!r}")
        try:
            return int(value) if not isinstance(value, float) or value.is_integer() else _bad(key, value, "an integer", source)
        except (TypeError, ValueError):
            _bad(key, value, "an integer", source)
    if tp is float:
        if isinstance(value, bool):
            _bad(key, value, "a number", source)
        try:
            return float(value)
        except (TypeError, ValueError):
            _bad(key, value, "a number", source)
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            _bad(key, value, "a string", source)
        return str(value)
    return value


def _bad(key: str, value: Any, want: str, source: str) -> Any:
    raise ConfigError(f"{source}: '{key}' must be {want}, got {value!r}")


def override(settings: T, dotted: str, value: Any, *, source: str = "command line", _where: str = "") -> T:
    """Return a copy of `settings` with the dotted key set (CLI flags beat the file)."""
    head, _, rest = dotted.partition(".")
    attr = head.replace("-", "_")
    names = {f.name for f in dataclasses.fields(settings)}  # type: ignore[arg-type]
    if attr not in names:
        raise ConfigError(f"{source}: unknown key '{_where}{dotted}'")
    current = getattr(settings, attr)
    if rest:
        new = override(current, rest, value, source=source, _where=f"{_where}{head}.")
    else:
        tp = typing.get_type_hints(type(settings))[attr]
        new = _coerce(tp, value, dotted, source)
    try:
        return dataclasses.replace(settings, **{attr: new})  # type: ignore[type-var]
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {dotted}: {exc}") from None


def load(
    cls: type[T],
    path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    *,
    paths: tuple[str, ...] = (),
    sqlite_urls: tuple[str, ...] = (),
) -> T:
    """Settings of type `cls` from a TOML file (or the defaults), then dotted `overrides` (CLI
    flags; None values are skipped).

    `paths` and `sqlite_urls` name dotted keys holding file paths and sqlite:/// URLs: relative
    ones are taken from the config file's directory, so a config works from any directory.
    A `source` field, if `cls` has one, records where the settings came from.
    """
    source = str(path) if path else "defaults"
    data = read_toml(path) if path else {}
    data.pop("source", None)
    if path:
        base = Path(path).resolve().parent
        for key in paths:
            _rebase(data, key, base, lambda v: str((base / v).resolve()) if v and not Path(v).is_absolute() else v)
        for key in sqlite_urls:
            _rebase(data, key, base, lambda v: _rebase_sqlite(v, base))
    settings = build(cls, data, source=source)
    if "source" in {f.name for f in dataclasses.fields(settings)}:  # type: ignore[arg-type]
        settings = dataclasses.replace(settings, source=source)  # type: ignore[type-var]
    for key, value in (overrides or {}).items():
        if value is not None:
            settings = override(settings, key, value)
    return settings


def _rebase(data: dict[str, Any], dotted: str, base: Path, fix: Any) -> None:
    *tables, key = dotted.split(".")
    for t in tables:
        data = data.get(t)  # type: ignore[assignment]
        if not isinstance(data, dict):
            return
    value = data.get(key)
    if isinstance(value, str):
        data[key] = fix(value)


def _rebase_sqlite(url: str, base: Path) -> str:
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and url != prefix + ":memory:":
        return prefix + str((base / url[len(prefix):]).resolve())
    return url


def to_dict(settings: Any) -> dict[str, Any]:
    """The settings as plain data (for fingerprints and --print-config)."""
    return dataclasses.asdict(settings)


# --- writing: `build`'s inverse ----------------------------------------------------------------


class TomlWritable:
    """Base of every settings dataclass: `to_toml()` writes the file its loader reads back to an
    equal object. A class whose file is not its fields one for one (the consultant's strategy
    tables) overrides `toml_data`; a class whose None is written as a number (TOML has no null)
    names that number in `TOML_NONE`."""

    def toml_data(self) -> dict[str, Any]:
        return to_data(self)

    def to_toml(self) -> str:
        return dump_toml(self.toml_data())


def to_data(settings: Any) -> dict[str, Any]:
    """The settings as TOML tables that `build(type(settings), ...)` reads back to an equal
    object. A key at its default is left out, as a hand-written config leaves it (the file says
    what differs, and a default changed later reaches it); fields outside the comparison (where
    the settings came from) are not settings and are left out too. A None whose default is None
    is left out; any other None is written as the class's `TOML_NONE` (a ValueError without one)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(settings):
        if not f.init or not f.compare:
            continue
        value = getattr(settings, f.name)
        if value is None:
            if _default(f) is None:
                continue
            none = getattr(type(settings), "TOML_NONE", None)
            if none is None:
                raise ValueError(f"{type(settings).__name__}.{f.name} is None, which TOML cannot say")
            out[f.name] = none
            continue
        if value != _default(f):
            out[f.name] = _plain(value)
    return out


_NO_DEFAULT = object()


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return _NO_DEFAULT


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return value.toml_data() if isinstance(value, TomlWritable) else to_data(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def dump_toml(data: dict[str, Any]) -> str:
    """TOML text of plain tables (tomli-w: the standard library reads TOML but does not write it)."""
    import tomli_w

    return tomli_w.dumps(data)


def merge_tables(*parts: dict[str, Any] | str) -> dict[str, Any]:
    """One config's tables from plain tables and TOML text (the [tls] table the PKI writes, the
    tables a bench adds), merged in order: a table given twice has the keys of both, the later
    value wins."""
    out: dict[str, Any] = {}
    for part in parts:
        _merge_into(out, tomllib.loads(part) if isinstance(part, str) else part)
    return out


def _merge_into(out: dict[str, Any], more: dict[str, Any]) -> None:
    for key, value in more.items():
        if isinstance(value, dict):
            if not isinstance(out.get(key), dict):
                out[key] = {}  # a table of its own: the parts given are never changed
            _merge_into(out[key], value)
        else:
            out[key] = value
