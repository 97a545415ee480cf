"""A session's modes, config options, models, usage and title (pure: no I/O).

What ACP v1 says (schema: `NewSessionResponse`, `LoadSessionResponse`, `SessionModeState`,
`SessionConfigOption`, `UsageUpdate`, `SessionInfoUpdate`):

* `session/new` and `session/load` may return `modes` {currentModeId, availableModes: [{id,
  name, description}]} and `configOptions` [{id, name, description, category, type: "select",
  currentValue, options: [{value, name, description}] or [{group, name, options: [...]}]}];
* config options are preferred over modes: when an agent offers both, the mode is set through
  its config option of category "mode" (`session/set_config_option` {sessionId, configId,
  value}, answered with the full `configOptions`), else with `session/set_mode` {sessionId,
  modeId};
* models: `session/set_model` left the spec, but real agents (claude-code-acp, codex-acp) still
  return `models` {currentModelId, availableModels: [{modelId, name, description}]} and accept
  `session/set_model` {sessionId, modelId}: used only when no config option of category "model"
  exists;
* `current_mode_update` {currentModeId}, `config_option_update` {configOptions} (the full set),
  `usage_update` {used, size, cost: {amount, currency}}, `session_info_update` {title,
  updatedAt}: null clears, an absent field is unchanged.

`SessionState` keeps the latest of all this per session; `Choices` is what the owner chose
(stored with the membership) and `plan_choices()` says which calls bring a session there again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

MODE, MODEL, CONFIG = "mode", "model", "config"


@dataclass(frozen=True)
class Choice:
    id: str
    name: str
    description: str = ""
    group: str = ""


@dataclass(frozen=True)
class ConfigOption:
    id: str
    name: str
    description: str = ""
    category: str = ""
    type: str = "select"
    current: str | None = None
    choices: tuple[Choice, ...] = ()

    @property
    def settable(self) -> bool:
        return self.type in ("select", "boolean") and bool(self.choices)


@dataclass(frozen=True)
class Menu:
    """A current value and the values to choose from (modes, models)."""

    current: str | None
    choices: tuple[Choice, ...]


@dataclass(frozen=True)
class Usage:
    used: int
    size: int
    cost: float | None = None
    currency: str | None = None


@dataclass(frozen=True)
class Selector:
    """How to see and change one setting of a session.

    via: "config" (session/set_config_option with config_id), "set_mode" or "set_model".
    """

    kind: str  # mode | model | config
    via: str
    key: str  # the config option id, or "mode" / "model"
    name: str
    current: str | None
    choices: tuple[Choice, ...]
    boolean: bool = False  # a boolean config option: set with `type: "boolean"` and a JSON bool

    def current_choice(self) -> Choice | None:
        return next((c for c in self.choices if c.id == self.current), None)


class ChoiceError(ValueError):
    """A value that is not one of a setting's choices; str() is one readable line."""


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _choice(item: Any, id_key: str, group: str = "") -> Choice | None:
    if not isinstance(item, dict):
        return None
    ident = _str(item.get(id_key))
    if not ident:
        return None
    return Choice(ident, _str(item.get("name")) or ident, _str(item.get("description")) or "", group)


def parse_modes(value: Any) -> Menu | None:
    if not isinstance(value, dict):
        return None
    items = value.get("availableModes")
    choices = tuple(c for c in (_choice(i, "id") for i in (items if isinstance(items, list) else [])) if c)
    return Menu(_str(value.get("currentModeId")), choices)


def parse_models(value: Any) -> Menu | None:
    if not isinstance(value, dict):
        return None
    items = value.get("availableModels")
    choices = tuple(c for c in (_choice(i, "modelId") for i in (items if isinstance(items, list) else [])) if c)
    return Menu(_str(value.get("currentModelId")), choices)


def parse_config_options(value: Any) -> tuple[ConfigOption, ...] | None:
    if not isinstance(value, list):
        return None
    found = []
    for item in value:
        if not isinstance(item, dict) or not _str(item.get("id")):
            continue
        choices: list[Choice] = []
        for entry in item.get("options") if isinstance(item.get("options"), list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("options"), list):  # a group
                group = _str(entry.get("name")) or _str(entry.get("group")) or ""
                choices.extend(c for c in (_choice(o, "value", group) for o in entry["options"]) if c)
            else:
                choice = _choice(entry, "value")
                if choice:
                    choices.append(choice)
        kind = _str(item.get("type")) or "select"
        if kind == "boolean" and not choices:  # an on/off toggle: its two values (stable ACP)
            choices = [Choice("true", "on"), Choice("false", "off")]
        current = item.get("currentValue")
        if isinstance(current, bool):
            current = "true" if current else "false"
        elif current is not None and not isinstance(current, str):
            current = str(current)
        found.append(
            ConfigOption(
                id=item["id"],
                name=_str(item.get("name")) or item["id"],
                description=_str(item.get("description")) or "",
                category=_str(item.get("category")) or "",
                type=kind,
                current=current,
                choices=tuple(choices),
            )
        )
    return tuple(found)


def parse_usage(raw: dict[str, Any]) -> Usage | None:
    used, size = raw.get("used"), raw.get("size")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (used, size)):
        return None
    cost = raw.get("cost")
    amount = currency = None
    if (
        isinstance(cost, dict)
        and isinstance(cost.get("amount"), (int, float))
        and not isinstance(cost.get("amount"), bool)
    ):
        amount, currency = float(cost["amount"]), _str(cost.get("currency"))
    return Usage(used, size, amount, currency)


def resolve(choices: tuple[Choice, ...], text: str, what: str = "value") -> Choice:
    """The choice a person means by `text`: its id, or its name, in any case, or a unique
    prefix of either. Raises ChoiceError naming the choices."""
    wanted = text.strip()
    if not wanted:
        raise ChoiceError(f"no {what} given; choose one of: {names(choices)}")
    for test in (
        lambda c: c.id == wanted,
        lambda c: c.id.lower() == wanted.lower(),
        lambda c: c.name.lower() == wanted.lower(),
    ):
        found = [c for c in choices if test(c)]
        if len(found) == 1:
            return found[0]
    low = wanted.lower()
    found = [c for c in choices if c.id.lower().startswith(low) or c.name.lower().startswith(low)]
    if len(found) == 1:
        return found[0]
    if found:
        raise ChoiceError(f"{what} {wanted!r} is ambiguous: {names(tuple(found))}")
    raise ChoiceError(f"no {what} {wanted!r}; choose one of: {names(choices)}")


def names(choices: tuple[Choice, ...]) -> str:
    return ", ".join(c.id if c.name in ("", c.id) else f"{c.id} ({c.name})" for c in choices) or "none"


@dataclass
class SessionState:
    modes: Menu | None = None
    config: tuple[ConfigOption, ...] | None = None
    models: Menu | None = None
    usage: Usage | None = None
    title: str | None = None
    updated_at: str | None = None

    # --- what the agent said -----------------------------------------------------------
    def apply_result(self, result: Any) -> None:
        """A session/new, session/load, session/resume or session/set_config_option result:
        the fields it carries replace ours, the others stay (updates may come first)."""
        if not isinstance(result, dict):
            return
        if "modes" in result:
            self.modes = parse_modes(result.get("modes"))
        if "configOptions" in result:
            self.config = parse_config_options(result.get("configOptions"))
        if "models" in result:
            self.models = parse_models(result.get("models"))

    def apply_update(self, update: Any) -> bool:
        """Fold a normalised update in (acp.updates.Update); True if it was about our state."""
        raw = update.raw
        if update.kind == "mode":
            mode = _str(raw.get("currentModeId"))
            if mode is None:
                return False
            self.modes = replace(self.modes or Menu(None, ()), current=mode)
            self._sync_config(MODE, mode)
            return True
        if update.kind == "config":
            if update.config_options is None:
                return False
            self.config = update.config_options
            return True
        if update.kind == "usage":
            if update.usage is None:
                return False
            self.usage = update.usage
            return True
        if update.kind == "session_info":
            if "title" in raw:
                self.title = _str(raw.get("title"))
            if "updatedAt" in raw:
                self.updated_at = _str(raw.get("updatedAt"))
            return True
        return False

    def set_current(self, selector: Selector, value: str) -> None:
        """After a successful set call: what the agent now uses (its update may follow)."""
        if selector.via == "set_mode":
            self.modes = replace(self.modes or Menu(None, ()), current=value)
        elif selector.via == "set_model":
            self.models = replace(self.models or Menu(None, ()), current=value)
        else:
            self.config = tuple(replace(o, current=value) if o.id == selector.key else o for o in self.config or ())
            if selector.kind in (MODE, MODEL):
                menu = self.modes if selector.kind == MODE else self.models
                if menu is not None and any(c.id == value for c in menu.choices):
                    if selector.kind == MODE:
                        self.modes = replace(menu, current=value)
                    else:
                        self.models = replace(menu, current=value)

    def _sync_config(self, category: str, value: str) -> None:
        option = self._by_category(category)
        if option is not None and any(c.id == value for c in option.choices):
            self.config = tuple(replace(o, current=value) if o is option else o for o in self.config or ())

    # --- what can be set -----------------------------------------------------------
    def _by_category(self, category: str) -> ConfigOption | None:
        return next((o for o in self.config or () if o.category == category and o.settable), None)

    def selector(self, kind: str, key: str | None = None) -> Selector | None:
        """How to set the mode, the model, or the config option `key` (id or name)."""
        if kind in (MODE, MODEL):
            option = self._by_category(kind)
            if option is not None:
                return Selector(kind, "config", option.id, option.name, option.current, option.choices)
            menu = self.modes if kind == MODE else self.models
            if menu is not None and menu.choices:
                return Selector(
                    kind,
                    "set_mode" if kind == MODE else "set_model",
                    kind,
                    "Mode" if kind == MODE else "Model",
                    menu.current,
                    menu.choices,
                )
            return None
        option = self.option(key or "")
        if option is None or not option.settable:
            return None
        if option.category in (MODE, MODEL):
            return Selector(option.category, "config", option.id, option.name, option.current, option.choices)
        return Selector(
            CONFIG, "config", option.id, option.name, option.current, option.choices, boolean=option.type == "boolean"
        )

    def option(self, key: str) -> ConfigOption | None:
        options = self.config or ()
        return next((o for o in options if o.id == key), None) or next(
            (o for o in options if o.id.lower() == key.lower() or o.name.lower() == key.lower()), None
        )

    @property
    def mode(self) -> str | None:
        selector = self.selector(MODE)
        return selector.current if selector else (self.modes.current if self.modes else None)

    @property
    def model(self) -> str | None:
        selector = self.selector(MODEL)
        return selector.current if selector else (self.models.current if self.models else None)

    # --- storage ----------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """A snapshot to store (`from_json` reads it back): what !mode and !status show while
        the agent is not running."""

        def menu(m: Menu | None) -> dict | None:
            return None if m is None else {"current": m.current, "choices": [_choice_json(c) for c in m.choices]}

        return {
            "modes": menu(self.modes),
            "models": menu(self.models),
            "config": None
            if self.config is None
            else [
                {
                    "id": o.id,
                    "name": o.name,
                    "description": o.description,
                    "category": o.category,
                    "type": o.type,
                    "current": o.current,
                    "choices": [_choice_json(c) for c in o.choices],
                }
                for o in self.config
            ],
            "title": self.title,
        }

    @classmethod
    def from_json(cls, data: Any) -> SessionState:
        state = cls()
        if not isinstance(data, dict):
            return state

        def choices(items: Any) -> tuple[Choice, ...]:
            return tuple(
                Choice(
                    str(i.get("id")),
                    str(i.get("name") or i.get("id")),
                    str(i.get("description") or ""),
                    str(i.get("group") or ""),
                )
                for i in items or []
                if isinstance(i, dict) and i.get("id")
            )

        def menu(m: Any) -> Menu | None:
            return Menu(_str(m.get("current")), choices(m.get("choices"))) if isinstance(m, dict) else None

        state.modes, state.models = menu(data.get("modes")), menu(data.get("models"))
        if isinstance(data.get("config"), list):
            state.config = tuple(
                ConfigOption(
                    str(o["id"]),
                    str(o.get("name") or o["id"]),
                    str(o.get("description") or ""),
                    str(o.get("category") or ""),
                    str(o.get("type") or "select"),
                    _str(o.get("current")),
                    choices(o.get("choices")),
                )
                for o in data["config"]
                if isinstance(o, dict) and o.get("id")
            )
        state.title = _str(data.get("title"))
        return state


def _choice_json(c: Choice) -> dict[str, str]:
    item = {"id": c.id, "name": c.name}
    if c.description:
        item["description"] = c.description
    if c.group:
        item["group"] = c.group
    return item


# --- the owner's choices, and bringing a session back to them ----------------------------


@dataclass(frozen=True)
class Choices:
    """What the owner chose for one member (stored with the membership)."""

    mode: str | None = None
    model: str | None = None
    config: dict[str, str] = field(default_factory=dict)

    def with_choice(self, selector: Selector, value: str) -> Choices:
        if selector.kind == MODE:
            return replace(self, mode=value)
        if selector.kind == MODEL:
            return replace(self, model=value)
        return replace(self, config={**self.config, selector.key: value})

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "model": self.model, "config": dict(self.config)}

    @classmethod
    def from_json(cls, data: Any) -> Choices:
        if not isinstance(data, dict):
            return cls()
        config = data.get("config") if isinstance(data.get("config"), dict) else {}
        return cls(
            _str(data.get("mode")),
            _str(data.get("model")),
            {str(k): v for k, v in config.items() if isinstance(v, str)},
        )

    def __bool__(self) -> bool:
        return bool(self.mode or self.model or self.config)


@dataclass(frozen=True)
class Step:
    selector: Selector
    value: str


@dataclass(frozen=True)
class Skipped:
    kind: str
    key: str
    value: str
    reason: str


def plan_choices(state: SessionState, choices: Choices) -> tuple[list[Step], list[Skipped]]:
    """The calls that bring a (new, loaded, restarted) session to the owner's choices: only
    where the session differs, model first (other options may depend on it), mode last.
    Choices the session cannot take any more are skipped, with the reason."""
    steps: list[Step] = []
    skipped: list[Skipped] = []

    def want(kind: str, key: str, value: str) -> None:
        selector = state.selector(kind, key if kind == CONFIG else None)
        if selector is None:
            what = {MODE: "modes", MODEL: "models"}.get(kind, f"option {key!r}")
            skipped.append(Skipped(kind, key, value, f"the agent no longer offers {what}"))
            return
        if not any(c.id == value for c in selector.choices):
            skipped.append(Skipped(kind, key, value, f"{value!r} is no longer one of {names(selector.choices)}"))
            return
        if selector.current != value:
            steps.append(Step(selector, value))

    if choices.model is not None:
        want(MODEL, MODEL, choices.model)
    for key, value in choices.config.items():
        want(CONFIG, key, value)
    if choices.mode is not None:
        want(MODE, MODE, choices.mode)
    return steps, skipped
