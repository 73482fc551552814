"""Tool roles: which tool calls read, write or execute, and on what (docs/mapping.md#tool-roles).

A role is decided from data, in this order: the operator's ``mapping.tools`` patterns (an explicit
statement), then the call's arguments (an editor sub-command, a replace-style edit, a file named next to a
body to write, a shell command), then the exact tool names of the coding agents whose argument schemas are
documented, then — for a call whose arguments name only a file — its result. An English verb in a tool's
name decides nothing: ``check_update`` and ``get_commit`` read, and a search whose arguments hold a
``path`` and a short ``text`` is a search. The ``drift``, ``stall`` and progress code only ever see the
result (``Step.tool_class``, ``file_path``, ``command`` and the hashes).
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

#: Read tools by exact name: Claude Code ``Read``, SWE-agent ``open``, LangChain/Cline ``read_file``
#: and the usual viewers. Searches (``Grep``, ``Glob``, ``LS``) are deliberately absent: their ``path``
#: is a search root, not a file being read, and exploring with different patterns is not a read loop.
DEFAULT_READ: tuple[str, ...] = (
    "read", "read_file", "read_files", "open", "open_file", "view", "view_file", "cat", "cat_file",
    "get_file", "get_file_contents", "show_file",
)
#: Write tools by exact name: OpenHands / Anthropic / SWE-agent ``str_replace_editor`` (its ``command``
#: argument picks view/create/str_replace/insert/undo_edit), Claude Code ``Write``/``Edit``/``MultiEdit``/
#: ``NotebookEdit``, SWE-agent ``edit``/``create``, LangChain ``write_file``, Cline
#: ``write_to_file``/``replace_in_file``, Codex ``apply_patch``. Exact names of tools whose arguments are
#: known, never a verb pattern: ``save_note`` or ``check_update`` take their role from their arguments.
DEFAULT_WRITE: tuple[str, ...] = (
    "str_replace_editor", "str_replace_based_edit_tool", "file_editor", "text_editor*",
    "write", "write_file", "write_to_file", "create", "create_file", "edit", "edit_file", "multiedit",
    "notebookedit", "replace_in_file", "apply_patch", "patch_file",
)
#: Command tools: OpenHands ``execute_bash``, Claude Code / SWE-agent ``Bash``, LangChain ``terminal``
#: (ShellTool), Cline ``execute_command``, Cursor ``run_terminal_cmd``, Codex ``shell``.
DEFAULT_EXEC: tuple[str, ...] = (
    "bash", "sh", "shell", "terminal", "execute_bash", "execute_command", "execute_shell", "exec_command",
    "run_command", "run_shell", "run_shell_command", "run_terminal_cmd", "local_shell",
)

#: Argument keys holding the file a tool works on, tried in order (docs/mapping.md#fields); after them,
#: any key whose last word is one of them (``doc_path``, ``source-file``, ``notePath``; not ``profile``).
FILE_KEYS: tuple[str, ...] = ("path", "file_path", "filepath", "filename", "file", "target_file")
_FILE_KEY_WORD = re.compile(r"(?:^|[_-])(?:path|file|filename|filepath)$|[a-z0-9](?:Path|File|FileName|Filename)$")
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
    *((old, new) for old in ("search", "find", "original") for new in ("replace", "replacement", "replace_with")),
    ("old_content", "new_content"), ("oldText", "newText"), ("old_code", "new_code"))
_INSERTION_PAIRS = 2
#: Sub-commands of editor tools that multiplex reading and writing through a ``command`` argument
#: (``str_replace_editor`` and its kin); in such a tool ``command`` is never a shell command.
EDITOR_SUBCOMMANDS: Mapping[str, ToolClass] = {
    "view": "read", "create": "write", "str_replace": "write", "insert": "write", "undo_edit": "write",
}
#: A body of at least this many characters on one line is content to write, not a search text: queries
#: and patterns are short, file content is not (a shorter body on one line is a write only when the
#: result acknowledges it).
BODY_MIN_CHARS = 200
#: Longest bare-string argument taken as the file a read tool reads.
MAX_PATH_CHARS = 4096
#: Tool names whose class is remembered. Agents use a few dozen tools, so reaching this means names
#: carry per-call noise; the oldest entry is then forgotten.
MAX_CACHED_NAMES = 1024

#: Precedence when a name matches several lists: a write mistaken for a read would hide the change
#: that ends a read loop, so writes come first, then commands (which may change files too), then reads.
_PRECEDENCE: tuple[ToolClass, ...] = ("write", "exec", "read")


@dataclass(slots=True, frozen=True)
class ToolInfo:
    """What one tool call does, as far as its arguments, result and name tell.

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
    """Decides tool roles: configured patterns, then arguments, then known tool names, then results.

    Patterns configured under ``mapping.tools`` are an operator's statement and decide before anything
    else; a list left unset keeps its default names, and an empty list means "no tool of this class by
    name" (arguments still show a write).
    """

    __slots__ = ("_cache", "_configured", "_named")

    def __init__(self, cfg: ToolClassesConfig | None = None) -> None:
        configured: list[tuple[ToolClass, re.Pattern[str] | None]] = []
        named: list[tuple[ToolClass, re.Pattern[str] | None]] = []
        default_lists = {"read": DEFAULT_READ, "write": DEFAULT_WRITE, "exec": DEFAULT_EXEC}
        for tool_class in _PRECEDENCE:
            patterns = getattr(cfg, tool_class, None) if cfg is not None else None
            if patterns is None:
                named.append((tool_class, _compile(default_lists[tool_class])))
            else:
                configured.append((tool_class, _compile(patterns)))
        self._configured = [(c, rx) for c, rx in configured if rx is not None]
        self._named = [(c, rx) for c, rx in named if rx is not None]
        self._cache: dict[str, tuple[ToolClass | None, ToolClass | None]] = {}

    def _classes(self, tool_name: str) -> tuple[ToolClass | None, ToolClass | None]:
        """(the configured class, the default class) of a tool name (cached per name)."""
        cache = self._cache
        found = cache.get(tool_name)
        if found is None:
            found = (next((c for c, rx in self._configured if rx.match(tool_name)), None),
                     next((c for c, rx in self._named if rx.match(tool_name)), None))
            if len(cache) >= MAX_CACHED_NAMES:
                del cache[next(iter(cache))]
            cache[tool_name] = found
        return found

    def class_of(self, tool_name: str) -> ToolClass | None:
        """The class a tool's name alone gives it (configured patterns first), or None."""
        configured, named = self._classes(tool_name)
        return configured or named

    def classify(self, tool_name: str, args: dict[str, Any] | None, acknowledged: bool = False,
                 returned: bool = False) -> ToolInfo | None:
        """What a call of ``tool_name`` with ``args`` does; None when nothing says it reads, writes or runs.

        ``acknowledged``: its result only acknowledges an action (``ok``, ``Saved``); ``returned``: it has
        a result that is neither an acknowledgement, nor nothing, nor a failure. In order: a configured
        pattern; the arguments (an editor sub-command, an edit, a file named next to a body to write); a
        known tool name; a result returned for arguments that name only a file (a read).
        """
        configured, named = self._classes(tool_name)
        if configured is not None:
            return _as_class(configured, args)
        if args:
            shown = _by_arguments(args, acknowledged)
            if shown is not None:
                return shown
        if named is not None:
            return _as_class(named, args)
        if args and returned and not acknowledged:
            path = _only_file(args)
            if path is not None:
                return ToolInfo("read", file_path=path)
        return None

    def classify_text(self, tool_name: str, text: str) -> ToolInfo | None:
        """A call whose only argument is a bare string (OpenInference records single-argument LangChain
        tools that way): it is the command of an exec tool or the path of a read tool. Only a configured
        pattern or a known name says so: a bare string may be a query, a test target or an address."""
        tool_class = self.class_of(tool_name)
        text = text.strip()
        if tool_class is None or not text:
            return None
        if tool_class == "exec":
            return ToolInfo("exec", command=text)
        if tool_class == "read" and "\n" not in text and len(text) <= MAX_PATH_CHARS:
            return ToolInfo("read", file_path=text)
        return ToolInfo(tool_class)


def _as_class(tool_class: ToolClass, args: dict[str, Any] | None) -> ToolInfo:
    """A call of a tool whose class a name gives: its file, command or write from the arguments."""
    if not args:
        return ToolInfo(tool_class)
    if tool_class == "exec":
        return ToolInfo("exec", file_path=_target(args), command=_command(args))
    subcommand = args.get("command")
    if isinstance(subcommand, str) and subcommand in EDITOR_SUBCOMMANDS:
        tool_class = EDITOR_SUBCOMMANDS[subcommand]
    file_path = _target(args)
    if tool_class == "read":
        return ToolInfo("read", file_path=file_path)
    return _write_info(file_path, args)


def _by_arguments(args: dict[str, Any], acknowledged: bool) -> ToolInfo | None:
    """The role the arguments alone show, whatever the tool's name (a write, or an editor's ``view``);
    None when they show none.

    - an editor sub-command (``command: view|create|str_replace|insert|undo_edit``) next to a file;
    - a replace-style edit (old and new text) of a file;
    - a file named next to a body to write: a multi-line string, or one of :data:`BODY_MIN_CHARS` or
      more, or any non-empty string when the result acknowledges the call. A ``path`` next to a short
      ``text`` is what a search takes, so it is no write on its own.
    """
    found = _target_item(args)
    if found is None:
        return None
    path_key, path = found
    subcommand = args.get("command")
    if isinstance(subcommand, str) and subcommand in EDITOR_SUBCOMMANDS:
        role = EDITOR_SUBCOMMANDS[subcommand]
        return ToolInfo("read", file_path=path) if role == "read" else _write_info(path, args)
    if any(isinstance(args.get(old), str) and isinstance(args.get(new), str) for old, new in EDIT_KEYS):
        return _write_info(path, args)
    for key, value in args.items():
        if key != path_key and key not in _COMMAND_KEY_NAMES and isinstance(value, str) and value and (
                acknowledged or "\n" in value or len(value) >= BODY_MIN_CHARS):
            return _write_info(path, args)
    return None


_COMMAND_KEY_NAMES = frozenset(k for k, _ in COMMAND_KEYS)


def _only_file(args: Mapping[str, Any]) -> str | None:
    """The file of arguments that name a file and nothing else in text (numbers and flags may go with
    it: ``offset``, ``limit``): a call that returns something for them reads that file."""
    path = _target(args)
    if path is None or "\n" in path:
        return None
    others = sum(1 for v in args.values() if isinstance(v, (str, list, dict)))
    return path if others == 1 else None


def _target(args: Mapping[str, Any]) -> str | None:
    """The file the arguments name (see :func:`_target_item`)."""
    found = _target_item(args)
    return None if found is None else found[1]


def _target_item(args: Mapping[str, Any]) -> tuple[str, str] | None:
    """(key, file) of the file the arguments name: a :data:`FILE_KEYS` key, else a key whose last word
    is one (``doc_path``), whose value is a non-empty string (the mapper cuts a long one to the string
    limit)."""
    for key in FILE_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value:
            return key, value
    for key, value in args.items():
        if isinstance(key, str) and isinstance(value, str) and value and _FILE_KEY_WORD.search(key):
            return key, value
    return None


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
