"""Shell completion scripts (bash, zsh, fish) generated from the argparse parser.

The parser is walked once into `Node`s: each command path (`""`, `check`, `history
record`) with its flags, the flags that take a value (their choices, or None for a free
value, completed as a file name) and its subcommands. Each shell gets the same data as
functions of its own; the logic in the shell is the same for all three: the command path
is the words typed so far that name a subcommand of the path before them; after a flag
that takes a value, its choices (or files); on a word starting with `-`, the path's
flags; else the path's subcommands, or files where it has none.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field

FILES = "@files"  # a free value: complete a file name


@dataclass
class Node:
    """One command path of the parser and what may follow it."""

    path: str
    flags: list[str] = field(default_factory=list)
    values: dict[str, tuple[str, ...] | None] = field(default_factory=dict)
    helps: dict[str, str] = field(default_factory=dict)  # flag or subcommand -> its help
    commands: list[str] = field(default_factory=list)
    words: tuple[str, ...] = ()  # the choices of a positional (`completion SHELL`)


def walk(parser: argparse.ArgumentParser, path: str = "") -> list[Node]:
    """`parser`'s node and every subcommand's, depth first, in --help order."""
    node = Node(path)
    nodes = [node]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                node.commands.append(name)
                node.helps[name] = _plain(helps.get(name, ""))
                nodes += walk(sub, f"{path} {name}".strip())
            continue
        if not action.option_strings and action.choices and not node.words:
            node.words = tuple(map(str, action.choices))
        for flag in action.option_strings:
            node.flags.append(flag)
            node.helps[flag] = _plain(action.help or "")
            if action.nargs != 0:
                node.values[flag] = tuple(map(str, action.choices)) if action.choices else None
    return nodes


def _plain(text: str) -> str:
    """A help text as one short line (fish shows it beside the candidate)."""
    line = " ".join(text.replace("%%", "%").split())
    return line if len(line) <= 70 else line[:67] + "..."


def _data_functions(nodes: list[Node], prefix: str) -> str:
    """`<prefix>_commands PATH`, `<prefix>_words PATH`, `<prefix>_flags PATH` and
    `<prefix>_values PATH FLAG` as `case` statements (the same text is valid bash and
    zsh)."""

    def case(name: str, arms: list[tuple[str, str]]) -> str:
        body = "".join(f"        {shlex.quote(k)}) echo {shlex.quote(v)} ;;\n" for k, v in arms)
        key = '"$1|$2"' if name == "values" else '"$1"'
        return f"{prefix}_{name}() {{\n    case {key} in\n{body}    esac\n}}\n"

    values = [
        (f"{n.path}|{flag}", FILES if choices is None else " ".join(choices))
        for n in nodes for flag, choices in n.values.items()
    ]
    return (
        case("commands", [(n.path, " ".join(n.commands)) for n in nodes if n.commands])
        + case("words", [(n.path, " ".join(n.words)) for n in nodes if n.words])
        + case("flags", [(n.path, " ".join(n.flags)) for n in nodes])
        + case("values", values)
    )


_BASH = """\
_gatekeeper() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="" cmdpath="" word subs values i
    (( COMP_CWORD > 0 )) && prev="${COMP_WORDS[COMP_CWORD-1]}"
    if [[ "$cur" == "=" ]]; then cur=""; fi
    if [[ "$prev" == "=" ]] && (( COMP_CWORD > 1 )); then prev="${COMP_WORDS[COMP_CWORD-2]}"; fi
    for (( i=1; i<COMP_CWORD; i++ )); do
        word="${COMP_WORDS[i]}"
        subs=" $(_gatekeeper_commands "$cmdpath") "
        if [[ "$word" != -* && "$subs" == *" $word "* ]]; then
            cmdpath="${cmdpath:+$cmdpath }$word"
        fi
    done
    values="$(_gatekeeper_values "$cmdpath" "$prev")"
    if [[ "$prev" == -* && -n "$values" ]]; then
        if [[ "$values" == "@files" ]]; then
            COMPREPLY=($(compgen -f -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$values" -- "$cur"))
        fi
        return 0
    fi
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$(_gatekeeper_flags "$cmdpath")" -- "$cur"))
        return 0
    fi
    subs="$(_gatekeeper_commands "$cmdpath")$(_gatekeeper_words "$cmdpath")"
    if [[ -n "$subs" ]]; then
        COMPREPLY=($(compgen -W "$subs" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
complete -o filenames -F _gatekeeper gatekeeper
"""

_ZSH = """\
_gatekeeper() {
    local cur="${words[CURRENT]}" prev="${words[CURRENT-1]}" cmdpath="" word subs values i
    for (( i=2; i<CURRENT; i++ )); do
        word="${words[i]}"
        subs=" $(_gatekeeper_commands "$cmdpath") "
        if [[ "$word" != -* && "$subs" == *" $word "* ]]; then
            cmdpath="${cmdpath:+$cmdpath }$word"
        fi
    done
    values="$(_gatekeeper_values "$cmdpath" "$prev")"
    if [[ "$prev" == -* && -n "$values" ]]; then
        if [[ "$values" == "@files" ]]; then _files; else compadd -- ${=values}; fi
        return
    fi
    if [[ "$cur" == -* ]]; then
        compadd -- ${=$(_gatekeeper_flags "$cmdpath")}
        return
    fi
    subs="$(_gatekeeper_commands "$cmdpath")$(_gatekeeper_words "$cmdpath")"
    if [[ -n "$subs" ]]; then compadd -- ${=subs}; else _files; fi
}
if [[ "${zsh_eval_context[-1]}" == loadautofunc ]]; then
    _gatekeeper "$@"
else
    compdef _gatekeeper gatekeeper
fi
"""

HOW = {
    "bash": "source <(gatekeeper completion bash), or save it as "
    "~/.local/share/bash-completion/completions/gatekeeper",
    "zsh": "after compinit: source <(gatekeeper completion zsh), or save it as _gatekeeper "
    "in a directory of $fpath",
    "fish": "gatekeeper completion fish > ~/.config/fish/completions/gatekeeper.fish",
}


def _header(shell: str, version: str) -> str:
    return (
        f"# gatekeeper {version} completion for {shell}, generated by "
        f"`gatekeeper completion {shell}` from the command line's parser.\n"
        f"# Load it: {HOW[shell]}\n"
    )


def bash(nodes: list[Node], version: str) -> str:
    return _header("bash", version) + _data_functions(nodes, "_gatekeeper") + _BASH


def zsh(nodes: list[Node], version: str) -> str:
    return (
        "#compdef gatekeeper\n" + _header("zsh", version)
        + _data_functions(nodes, "_gatekeeper") + _ZSH
    )


_FISH = """\
function __gatekeeper_path
    set -l words (commandline -opc)
    set -e words[1]
    set -l cmdpath ""
    for word in $words
        if not string match -q -- '-*' $word
            if contains -- $word (string split ' ' -- (__gatekeeper_commands "$cmdpath"))
                set cmdpath (string trim -- "$cmdpath $word")
            end
        end
    end
    echo $cmdpath
end
function __gatekeeper_at
    set -l here (__gatekeeper_path)
    test "$here" = "$argv[1]"
end
complete -c gatekeeper -f
"""


def fish(nodes: list[Node], version: str) -> str:
    arms = "".join(
        f"        case {shlex.quote(n.path)}\n"
        f"            echo {shlex.quote(' '.join(n.commands))}\n"
        for n in nodes if n.commands
    )
    lines = [
        _header("fish", version).rstrip("\n"),
        f"function __gatekeeper_commands\n    switch \"$argv[1]\"\n{arms}    end\nend",
        _FISH.rstrip("\n"),
    ]
    for n in nodes:
        at = f"-n \"__gatekeeper_at '{n.path}'\""  # command names need no quoting
        for name in n.commands:
            lines.append(f"complete -c gatekeeper {at} -a {name} -d {shlex.quote(n.helps[name])}")
        if n.words:
            lines.append(f"complete -c gatekeeper {at} -a {shlex.quote(' '.join(n.words))}")
        elif not n.commands:  # a leaf's positionals are files
            lines.append(f"complete -c gatekeeper {at} -F")
        for flag in n.flags:
            lines.append(f"complete -c gatekeeper {at} {_fish_flag(flag, n)}")
    return "\n".join(lines) + "\n"


def _fish_flag(flag: str, node: Node) -> str:
    spec = f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}"
    if flag in node.values:
        choices = node.values[flag]
        spec += " -r -F" if choices is None else f" -x -a {shlex.quote(' '.join(choices))}"
    return f"{spec} -d {shlex.quote(node.helps[flag])}"


SHELLS = {"bash": bash, "zsh": zsh, "fish": fish}
