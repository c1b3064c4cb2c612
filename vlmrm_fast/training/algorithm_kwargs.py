"""``rl.kwargs`` checked against the SB3 algorithm's signature and annotated types.

A YAML value of the wrong type (``batch_size: "64"``, ``learning_rate: 3e-4``, which
YAML reads as a string) would otherwise pass into SB3 and fail minutes later with an
error that names no field. Here it fails before anything starts, naming the field and
the type expected. Values are also brought into the form SB3 wants: lists where a
tuple is annotated (``train_freq: [1, episode]``), and ``policy_kwargs`` class names
(``activation_fn: ReLU``, ``optimizer_class: AdamW``) resolved to the classes.
"""

from __future__ import annotations

import collections.abc
import difflib
import inspect
import re
import types
import typing
from typing import Any

from vlmrm_fast.checks import FieldError

# Arguments the config sets through its own fields.
_SET_ELSEWHERE = {
    "policy": "rl.policy",
    "env": "env section",
    "seed": "seed",
    "device": "rl.device",
    "tensorboard_log": "logging.tensorboard",
    "verbose": "(not configurable: the run logs to TensorBoard)",
    "_init_setup_model": "(internal)",
}
# Counts SB3 takes as they are and would run with silently (a buffer_size of 0 or -1 keeps one row of n_envs
# transitions): refused unless positive.
_POSITIVE = {
    "buffer_size": "transitions the replay buffer keeps",
    "batch_size": "transitions in a gradient step's minibatch",
    "n_steps": "steps of each env in a rollout",
    "n_epochs": "passes over a rollout",
}
_NUMBER_AS_TEXT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


class KwargsError(FieldError):
    """``rl.kwargs`` holds a field the algorithm lacks, or a value of the wrong type (its field:
    ``kwargs.<name>``, reported at ``rl``)."""


def algorithm_class(name: str) -> type:
    import stable_baselines3

    return getattr(stable_baselines3, name)


def check_algorithm_kwargs(algorithm: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments for ``algorithm`` (SAC, PPO, DQN) as SB3 wants them; a
    :class:`KwargsError` naming the field when one is unknown or of the wrong type."""
    cls = algorithm_class(algorithm)
    parameters = inspect.signature(cls.__init__).parameters
    out = {}
    for key, value in kwargs.items():
        where = f"kwargs.{key}"
        if key in _SET_ELSEWHERE:
            raise KwargsError(where, f"set by the config's {_SET_ELSEWHERE[key]}, not in rl.kwargs")
        if key not in parameters:
            close = difflib.get_close_matches(
                str(key), [p for p in parameters if p not in _SET_ELSEWHERE and p != "self"], n=1
            )
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise KwargsError(where, f"{algorithm} has no argument {key!r}{hint}")
        annotation = parameters[key].annotation
        converted = _convert(value, annotation, where) if annotation is not inspect.Parameter.empty else value
        if key in _POSITIVE and isinstance(converted, int) and converted < 1:
            raise KwargsError(where, f"must be a positive integer ({_POSITIVE[key]}), got {converted}")
        if key == "policy_kwargs" and isinstance(converted, dict):
            converted = _resolve_policy_classes(converted, where)
        out[key] = converted
    return out


class _Mismatch(Exception):
    pass


def _convert(value: Any, hint: Any, where: str) -> Any:
    try:
        return _match(value, hint)
    except _Mismatch:
        raise KwargsError(where, f"expected {_describe(hint)}, got {_show(value)}{_text_hint(value, hint)}") from None


def _match(value: Any, hint: Any) -> Any:
    """``value`` converted to fit ``hint`` (lists to tuples), or _Mismatch."""
    if hint is Any or isinstance(hint, (str, typing.ForwardRef)):
        return value
    if hint in _SCALARS:
        if _SCALARS[hint](value):
            return value
        raise _Mismatch
    container = _CONTAINERS.get(typing.get_origin(hint) or hint)
    if container is not None:
        return container(value, typing.get_args(hint))
    if isinstance(hint, type):
        if isinstance(value, hint):
            return value
        raise _Mismatch
    return value  # an annotation this checker does not know: SB3 decides


def _union(value: Any, options: tuple) -> Any:
    for option in options:
        try:
            return _match(value, option)
        except _Mismatch:
            continue
    raise _Mismatch


def _tuple(value: Any, args: tuple) -> tuple:
    if not isinstance(value, (list, tuple)):
        raise _Mismatch
    if args and args[-1] is not Ellipsis:
        if len(value) != len(args):
            raise _Mismatch
        return tuple(_match(v, a) for v, a in zip(value, args))
    return tuple(_match(v, args[0]) for v in value) if args else tuple(value)


def _list(value: Any, args: tuple) -> list:
    if not isinstance(value, list):
        raise _Mismatch
    return [_match(v, args[0]) for v in value] if args else value


def _dict(value: Any, args: tuple) -> dict:
    if not isinstance(value, dict):
        raise _Mismatch
    return {_match(k, args[0]): _match(v, args[1]) for k, v in value.items()} if args else value


def _callable(value: Any, args: tuple) -> Any:
    if callable(value):
        return value
    raise _Mismatch


def _class(value: Any, args: tuple) -> type:
    if isinstance(value, type) and (not args or not isinstance(args[0], type) or issubclass(value, args[0])):
        return value
    raise _Mismatch


_SCALARS = {
    type(None): lambda v: v is None,
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    str: lambda v: isinstance(v, str),
}
_CONTAINERS = {
    typing.Union: _union,
    types.UnionType: _union,
    tuple: _tuple,
    list: _list,
    dict: _dict,
    collections.abc.Callable: _callable,
    type: _class,
}


def _describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(_describe(a) for a in args))
    if hint is type(None):
        return "null"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if hint in names:
        return names[hint]
    if origin is tuple:
        if args and args[-1] is not Ellipsis:
            return "a list [" + ", ".join(_short(a) for a in args) + "]"
        return "a list"
    if origin is list or hint is list:
        return "a list"
    if origin is dict or hint is dict:
        return "a mapping"
    if origin is collections.abc.Callable:
        return "a schedule (a Python callable; not expressible in YAML)"
    if origin is type:
        return f"a class ({_short(args[0]) if args else 'type'}; not expressible in YAML)"
    return getattr(hint, "__name__", str(hint))


def _short(hint: Any) -> str:
    return {int: "int", float: "float", str: "str", bool: "bool"}.get(hint, getattr(hint, "__name__", str(hint)))


def _show(value: Any) -> str:
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"{value!r} ({type(value).__name__})"


def _text_hint(value: Any, hint: Any) -> str:
    if isinstance(value, str) and _NUMBER_AS_TEXT.match(value.strip()):
        text = value.strip()
        number = int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)
        try:
            _match(number, hint)
        except _Mismatch:
            return ""
        text = value.strip().lower()
        if "e" in text:
            mantissa, exponent = text.split("e", 1)
            mantissa = mantissa if "." in mantissa else mantissa + ".0"
            exponent = exponent if exponent[:1] in ("+", "-") else "+" + exponent
            return f"; YAML reads {value} as text: write {mantissa}e{exponent} (a decimal point and a signed exponent)"
        return f"; remove the quotes: {value.strip()}"
    return ""


# policy_kwargs entries that SB3 wants as classes, by the module that holds them
_POLICY_CLASSES = {"activation_fn": "torch.nn", "optimizer_class": "torch.optim"}


def _resolve_policy_classes(policy_kwargs: dict[str, Any], where: str) -> dict[str, Any]:
    import importlib

    out = dict(policy_kwargs)
    for key, module_name in _POLICY_CLASSES.items():
        value = out.get(key)
        if not isinstance(value, str):
            continue
        module = importlib.import_module(module_name)
        name = value.split(".")[-1]
        cls = getattr(module, name, None)
        if not isinstance(cls, type):
            options = [n for n in dir(module) if isinstance(getattr(module, n), type) and not n.startswith("_")]
            close = [o for o in options if o.lower() == name.lower()] or difflib.get_close_matches(name, options, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise KwargsError(f"{where}.{key}", f"{value!r} is not a class in {module_name}{hint}")
        out[key] = cls
    return out
