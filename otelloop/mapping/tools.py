"""Tool classification: which tool calls read, write or execute, and on what (docs/mapping.md).

This module owns the default tool-name patterns of the common coding agents, the argument keys that
carry a file path, a shell command, written content or a replace-style edit, and the classifier the
mapper calls for every tool step whose arguments parse to a JSON object. The ``drift`` and ``stall``
detectors only ever see its result (``Step.tool_class``, ``file_path``, ``command`` and the hashes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import translate
from typing import TYPE_CHECKING, Any

from otelloop.model import ToolClass

if TYPE_CHECKING:
    from otelloop.config import ToolClassesConfig

#: Read tools: Claude Code ``Read``, SWE-agent ``open``, LangChain/Cline ``read_file`` and the usual
#: viewers. Searches (``Grep``, ``Glob``, ``LS``) are deliberately absent: their ``path`` is a search
#: root, not a file being read, and exploring with different patterns is not a read loop.
DEFAULT_READ: tuple[str, ...] = (
    "read", "read_file", "read_files", "open", "open_file", "view", "view_file", "cat", "cat_file",
    "get_file", "get_file_contents", "show_file",
)
#: Write tools: OpenHands / Anthropic / SWE-agent ``str_replace_editor`` (its ``command`` argument picks
#: view/create/str_replace/insert/undo_edit), Claude Code ``Write``/``Edit``/``MultiEdit``, SWE-agent
#: ``edit``/``create``, LangChain ``write_file``, Cline ``write_to_file``/``replace_in_file``, Codex
#: ``apply_patch``.
#: Beyond these, a tool named with a verb that changes state (``save_note``, ``create_ticket``,
#: ``file_write``) is a write too: what tells its calls apart is what they write, not what they return.
STATE_CHANGING_VERBS: tuple[str, ...] = (
    "write", "save", "create", "update", "edit", "append", "insert", "upload", "put", "set", "add", "delete",
    "remove", "rename", "move", "copy", "commit", "apply", "patch", "replace", "modify", "store", "submit",
    "send", "post", "deploy", "install", "mkdir", "touch",
)
DEFAULT_WRITE: tuple[str, ...] = (
    "str_replace_editor", "str_replace_based_edit_tool", "file_editor", "text_editor*",
    "write", "write_file", "write_to_file", "create", "create_file", "edit", "edit_file", "multiedit",
    "notebookedit", "replace_in_file", "apply_patch", "patch_file",
    *(form.format(verb) for verb in STATE_CHANGING_VERBS for form in ("{}_*", "*_{}", "*.{}*")),
)
#: Command tools: OpenHands ``execute_bash``, Claude Code / SWE-agent ``Bash``, LangChain ``terminal``
#: (ShellTool), Cline ``execute_command``, Cursor ``run_terminal_cmd``, Codex ``shell``.
DEFAULT_EXEC: tuple[str, ...] = (
    "bash", "sh", "shell", "terminal", "execute_bash", "execute_command", "execute_shell", "exec_command",
    "run_command", "run_shell", "run_shell_command", "run_terminal_cmd", "local_shell",
)

#: Argument keys holding the file a tool works on, tried in order (docs/mapping.md#fields).
FILE_KEYS: tuple[str, ...] = ("path", "file_path", "filepath", "filename", "file", "target_file")
#: Argument keys holding a shell command, tried in order, with the separator that joins a list value:
#: ``command``/``cmd`` lists are argv vectors (Codex ``shell``), ``script``/``commands`` lists are
#: separate command lines (LangChain ``terminal``).
COMMAND_KEYS: tuple[tuple[str, str], ...] = (("command", " "), ("cmd", " "), ("script", "\n"),
                                             ("commands", "\n"))
#: Argument keys holding the full content of a full write, tried in order.
CONTENT_KEYS: tuple[str, ...] = ("content", "file_text", "text", "contents", "new_content", "body", "code",
                                 "source")
#: (old, new) argument keys of a replace-style edit, tried in order.
#: The first two pairs also mark an insertion (new text alone); the others only when both are given.
EDIT_KEYS: tuple[tuple[str, str], ...] = (
    ("old_str", "new_str"), ("old_string", "new_string"), ("old_text", "new_text"), ("old", "new"),
    ("search", "replace"), ("find", "replace"), ("original", "replacement"), ("old_content", "new_content"),
    ("oldText", "newText"), ("old_code", "new_code"))
_INSERTION_PAIRS = 2
#: Sub-commands of editor tools that multiplex reading and writing through a ``command`` argument
#: (``str_replace_editor`` and its kin); in such a tool ``command`` is never a shell command.
EDITOR_SUBCOMMANDS: Mapping[str, ToolClass] = {
    "view": "read", "create": "write", "str_replace": "write", "insert": "write", "undo_edit": "write",
}
#: Tool names whose class is remembered. Agents use a few dozen tools, so reaching this means names
#: carry per-call noise; the oldest entry is then forgotten.
MAX_CACHED_NAMES = 1024

#: Precedence when a name matches several lists: a write mistaken for a read would hide the change
#: that ends a read loop, so writes come first, then commands (which may change files too), then reads.
_PRECEDENCE: tuple[ToolClass, ...] = ("write", "exec", "read")


@dataclass(slots=True, frozen=True)
class ToolInfo:
    """What one tool call does, as far as its name and arguments tell.

    Attributes:
        tool_class: ``read``, ``write`` or ``exec``.
        file_path: the file read or written (or a path an exec tool names), if an argument says.
        command: the shell command of an ``exec`` tool.
        content: the whole new content written by a full write (None when it is not one).
        edit_old: text replaced by a replace-style edit.
        edit_new: replacement text of a replace-style edit (an insertion has no ``edit_old``).
    """

    tool_class: ToolClass
    file_path: str | None = None
    command: str | None = None
    content: str | None = None
    edit_old: str | None = None
    edit_new: str | None = None


def _compile(patterns: Iterable[str]) -> re.Pattern[str] | None:
    """One case-insensitive regex for a list of shell-style globs; None for an empty list."""
    parts = [translate(p) for p in patterns]
    return re.compile("|".join(parts), re.IGNORECASE) if parts else None


class ToolClassifier:
    """Classifies tool calls with name patterns compiled once.

    Patterns configured under ``mapping.tools`` are tried before the defaults of the other classes,
    so an operator can move a default tool to another class by listing it; a list left unset keeps
    its default, and an empty list means "no tool of this class".
    """

    __slots__ = ("_cache", "_matchers")

    def __init__(self, cfg: ToolClassesConfig | None = None) -> None:
        configured: list[tuple[ToolClass, re.Pattern[str] | None]] = []
        defaults: list[tuple[ToolClass, re.Pattern[str] | None]] = []
        default_lists = {"read": DEFAULT_READ, "write": DEFAULT_WRITE, "exec": DEFAULT_EXEC}
        for tool_class in _PRECEDENCE:
            patterns = getattr(cfg, tool_class, None) if cfg is not None else None
            if patterns is None:
                defaults.append((tool_class, _compile(default_lists[tool_class])))
            else:
                configured.append((tool_class, _compile(patterns)))
        self._matchers = [(c, rx) for c, rx in configured + defaults if rx is not None]
        self._cache: dict[str, ToolClass | None] = {}

    def class_of(self, tool_name: str) -> ToolClass | None:
        """The class a tool name falls in, or None when no pattern matches (cached per name)."""
        cache = self._cache
        if tool_name in cache:
            return cache[tool_name]
        found = next((c for c, rx in self._matchers if rx.match(tool_name)), None)
        if len(cache) >= MAX_CACHED_NAMES:
            del cache[next(iter(cache))]
        cache[tool_name] = found
        return found

    def classify(self, tool_name: str, args: dict[str, Any] | None) -> ToolInfo | None:
        """What a call of ``tool_name`` with ``args`` does; None for a tool of no known class.

        A tool of no known class whose arguments name a file and give it content (or a replace-style
        edit) is a write, whatever its name.
        """
        tool_class = self.class_of(tool_name)
        if tool_class is None:
            if args and _first_str(args, FILE_KEYS) is not None and _carries_content(args):
                return _write_info(_first_str(args, FILE_KEYS), args)
            return None
        if not args:
            return ToolInfo(tool_class)
        if tool_class == "exec":
            return ToolInfo("exec", file_path=_first_str(args, FILE_KEYS), command=_command(args))
        subcommand = args.get("command")
        if isinstance(subcommand, str) and subcommand in EDITOR_SUBCOMMANDS:
            tool_class = EDITOR_SUBCOMMANDS[subcommand]
        file_path = _first_str(args, FILE_KEYS)
        if tool_class == "read":
            return ToolInfo("read", file_path=file_path)
        return _write_info(file_path, args)


    def classify_text(self, tool_name: str, text: str) -> ToolInfo | None:
        """A call whose only argument is a bare string (OpenInference records single-argument LangChain
        tools that way): it is the command of an exec tool or the path of a read tool."""
        tool_class = self.class_of(tool_name)
        text = text.strip()
        if tool_class is None or not text:
            return None
        if tool_class == "exec":
            return ToolInfo("exec", command=text)
        if tool_class == "read" and "\n" not in text and len(text) <= 4096:
            return ToolInfo("read", file_path=text)
        return ToolInfo(tool_class)


def _write_info(file_path: str | None, args: dict[str, Any]) -> ToolInfo:
    """A write: a replace-style edit if it names old/new text, else a full write if it carries content.

    An append (``append: true``) carries content that is not the whole file, so it is neither.
    """
    for i, (old_key, new_key) in enumerate(EDIT_KEYS):
        old, new = args.get(old_key), args.get(new_key)
        if (isinstance(old, str) and isinstance(new, str)) or (
                i < _INSERTION_PAIRS and (isinstance(old, str) or isinstance(new, str))):
            return ToolInfo("write", file_path=file_path, edit_old=_str_or_none(old), edit_new=_str_or_none(new))
    if args.get("append") is True:
        return ToolInfo("write", file_path=file_path)
    return ToolInfo("write", file_path=file_path, content=_first_str(args, CONTENT_KEYS, allow_empty=True))


def _carries_content(args: Mapping[str, Any]) -> bool:
    return any(isinstance(args.get(k), str) for k in CONTENT_KEYS) or any(
        isinstance(args.get(old), str) and isinstance(args.get(new), str) for old, new in EDIT_KEYS)


def _first_str(args: Mapping[str, Any], keys: Iterable[str], allow_empty: bool = False) -> str | None:
    """The first of ``keys`` whose value is a string (non-empty unless ``allow_empty``)."""
    for key in keys:
        value = args.get(key)
        if isinstance(value, str) and (value or allow_empty):
            return value
    return None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _command(args: Mapping[str, Any]) -> str | None:
    """The shell command of an exec tool: a string, or a list of strings joined per :data:`COMMAND_KEYS`."""
    for key, separator in COMMAND_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return separator.join(value)
    return None
