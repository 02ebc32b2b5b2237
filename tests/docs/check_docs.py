#!/usr/bin/python3
"""Checks that the README's code runs as written and that muster(1) lists what --help lists.

Usage: check_docs.py MUSTER README.md muster.1 [MORE.md ...]

1. README's (and each MORE.md's) sh/bash/shell blocks parse with `bash -n`, and every muster invocation in them
   (muster, build/muster, any path ending in /muster) uses only flags its --help lists.
2. Their python blocks compile, and every name they load is defined in the block (before
   its use at the top level) or a builtin; a block that calls both torch.cuda.set_device and
   init_process_group calls set_device first.
3. For every subcommand of `muster --help`, the flags of `muster SUB --help` and those named
   in muster.1's section `.SS "muster SUB"` (option tags and bold flags) are the same.
4. README's table of commands (rows that begin "| `muster SUB`") has a row for every
   subcommand of `muster --help`, and none for a subcommand it lacks.
Each problem is printed as FILE:LINE: what is wrong; the exit status is 1 when there is one.
"""
import ast
import builtins
import re
import shlex
import subprocess
import sys

problems = []


def problem(where, text):
    problems.append(f"{where}: {text}")


# --- muster's own word on its flags ---------------------------------------------------------

def help_text(muster, args):
    run = subprocess.run([muster, *args, "--help"], capture_output=True, text=True, timeout=30)
    if run.returncode != 0:
        sys.exit(f"check_docs: '{muster} {' '.join(args)} --help' exited {run.returncode}: {run.stderr}")
    return run.stdout


def flags_in_help(text):
    """Every flag name of the help's Options section, e.g. {'-f', '--cluster', '--json'}."""
    flags, in_options = set(), False
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line):
            in_options = line == "Options:"
            continue
        m = re.match(r"^  (-[\w-]+(?:,-[\w-]+)*)", line) if in_options else None
        if m:
            flags.update(m.group(1).split(","))
    return flags


def subcommands_in_help(text):
    subs, in_subs = [], False
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line):
            in_subs = line == "Subcommands:"
            continue
        m = re.match(r"^  ([a-z][\w-]*)\s", line) if in_subs else None
        if m:
            subs.append(m.group(1))
    return subs


HELP_ONLY = {"-h", "--help"}


# --- 1. shell blocks -----------------------------------------------------------------------

def code_blocks(path):
    """(language, first line number of the code, text) of every fenced block."""
    blocks, lang, start, body = [], None, 0, []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            fence = re.match(r"^```\s*([\w+-]*)\s*$", line.rstrip("\n"))
            if fence and lang is None:
                lang, start, body = fence.group(1).lower(), number + 1, []
            elif line.rstrip("\n") == "```" and lang is not None:
                blocks.append((lang, start, "".join(body)))
                lang = None
            elif lang is not None:
                body.append(line)
    if lang is not None:
        problem(f"{path}:{start - 1}", "a code block is never closed")
    return blocks


def logical_lines(text, first):
    """Lines with backslash continuations joined, each with its line number."""
    out, buffer, start = [], "", None
    for offset, line in enumerate(text.splitlines()):
        if start is None:
            start = first + offset
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        out.append((start, buffer + line))
        buffer, start = "", None
    if buffer:
        out.append((start, buffer))
    return out


SEPARATORS = {"&&", "||", ";", "|", "(", ")", "&", "$(", "`", "{", "}", "!"}
PREFIXES = {"time", "sudo", "exec", "env", "nice", "timeout", "command"}


def muster_invocations(line):
    """The word lists that follow a muster at a command's position in one shell line."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="();&|`")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = list(lexer)
    except ValueError:
        return []  # bash -n reports what is wrong with the line
    calls, at_command = [], True
    for i, word in enumerate(words):
        if word in SEPARATORS or set(word) <= set("();&|`"):
            at_command = True
            continue
        if at_command and (word in PREFIXES or re.match(r"^[A-Za-z_]\w*=", word)):
            continue
        if at_command and (word == "muster" or word.endswith("/muster")):
            rest = []
            for w in words[i + 1:]:
                if w in SEPARATORS or set(w) <= set("();&|`<>"):
                    break
                rest.append(w)
            calls.append(rest)
        at_command = False
    return calls


def check_shell_block(readme, start, text, muster, top_help, sub_flags):
    run = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    if run.returncode != 0:
        line = re.search(r"line (\d+):", run.stderr)
        where = start + int(line.group(1)) - 1 if line else start
        problem(f"{readme}:{where}", "the shell block does not parse with bash -n: "
                + run.stderr.strip().replace("\n", "; "))
    for number, line in logical_lines(text, start):
        for args in muster_invocations(line):
            if args and not args[0].startswith("-"):
                sub, options = args[0], args[1:]
                if sub not in sub_flags:
                    problem(f"{readme}:{number}", f"'muster {sub}': no such subcommand in muster --help")
                    continue
                known, name = sub_flags[sub], f"muster {sub}"
            else:
                options, known, name = args, flags_in_help(top_help), "muster"
            for word in options:
                if word == "--":
                    break
                if re.match(r"^--?[A-Za-z]", word):
                    flag = word.split("=", 1)[0]
                    if flag not in known:
                        problem(f"{readme}:{number}", f"'{name}' has no flag '{flag}' "
                                f"(its --help lists {', '.join(sorted(known))})")


# --- 2. python blocks ----------------------------------------------------------------------

def defined_names(tree):
    """Every name the block binds, with the first line that binds it."""
    names = {}

    def bind(name, line):
        names[name] = min(line, names.get(name, line))

    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bind(node.id, node.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bind(node.name, node.lineno)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bind(alias.asname or alias.name.split(".")[0], node.lineno)
        elif isinstance(node, ast.arg):
            bind(node.arg, node.lineno)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bind(node.name, node.lineno)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                bind(name, node.lineno)
        elif isinstance(node, ast.MatchAs) and node.name:
            bind(node.name, node.lineno)
    return names


def loads_outside_functions(tree):
    """Names loaded at the top level, where they must be bound on an earlier line."""
    out = []

    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            out.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def call_lines(tree, attribute):
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and n.func.attr == attribute]


def check_python_block(readme, start, text):
    try:
        tree = ast.parse(text, filename=readme)
        compile(tree, readme, "exec")
    except SyntaxError as e:
        problem(f"{readme}:{start + (e.lineno or 1) - 1}", f"the python block does not compile: {e.msg}")
        return
    names = defined_names(tree)
    top_level = {id(n) for n in loads_outside_functions(tree)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
            continue
        where = f"{readme}:{start + node.lineno - 1}"
        if hasattr(builtins, node.id):
            continue
        if node.id not in names:
            problem(where, f"the python block uses '{node.id}', which it never defines or imports")
        elif id(node) in top_level and names[node.id] > node.lineno:
            problem(where, f"the python block uses '{node.id}' before line "
                    f"{start + names[node.id] - 1} defines it")
    set_device, init = call_lines(tree, "set_device"), call_lines(tree, "init_process_group")
    if set_device and init and min(set_device) > min(init):
        problem(f"{readme}:{start + min(init) - 1}", "init_process_group comes before "
                "torch.cuda.set_device; set the rank's device first, so that NCCL uses it")


# --- 3. the manual page against --help ---------------------------------------------------

def roff_plain(line):
    line = re.sub(r"\\f(\[[^]]*\]|\(..|.)", "", line)
    return line.replace("\\-", "-").replace("\\(aq", "'").replace("\\&", "")


def bold_words(line):
    """The words a roff line sets in bold."""
    words = [m.group(1) for m in re.finditer(r"\\fB(.*?)(?=\\f|$)", line)]
    m = re.match(r"^\.(B|BR|RB|BI|IB)\s+(.*)$", line)
    if m:
        try:
            args = shlex.split(m.group(2).replace("\\", "\\\\"))
        except ValueError:
            args = m.group(2).split()
        first_bold = m.group(1) in ("B", "BR", "BI")
        for i, arg in enumerate(args):
            if m.group(1) == "B" or (i % 2 == 0) == first_bold:
                words.append(arg)
    return [roff_plain(w.replace("\\\\", "\\")) for w in words]


FLAG = re.compile(r"(?<![\w/.-])(--?[A-Za-z][\w-]*)")


def man_sections(path):
    """{subcommand: (first line, flags named)} for every `.SS "muster SUB"` of the page."""
    sections, current = {}, None
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    after_tp = False
    for number, line in enumerate(lines, 1):
        if line.startswith(".SH") or line.startswith(".SS"):
            m = re.match(r'^\.SS\s+"?muster\s+([\w-]+)"?\s*$', line)
            current = m.group(1) if m else None
            if current:
                sections[current] = (number, {})
            after_tp = False
            continue
        if current is None:
            continue
        named = sections[current][1]
        words = []
        if after_tp:  # an option's tag: every flag on it
            words = [roff_plain(line)]
        words += bold_words(line)
        for word in words:
            for flag in FLAG.findall(word):
                named.setdefault(flag, number)
        after_tp = line.startswith(".TP") or line.startswith(".TQ")
    return sections


def check_man_page(page, sub_flags):
    sections = man_sections(page)
    for sub, flags in sub_flags.items():
        if sub not in sections:
            problem(page, f"no section '.SS \"muster {sub}\"' for the subcommand {sub}")
            continue
        start, named = sections[sub]
        for flag in sorted(flags - HELP_ONLY - set(named)):
            problem(f"{page}:{start}", f"'muster {sub} --help' lists {flag}, which the "
                    f"section 'muster {sub}' does not name")
        for flag, line in sorted(named.items(), key=lambda item: item[1]):
            if flag not in flags:
                problem(f"{page}:{line}", f"the section 'muster {sub}' names {flag}, which "
                        f"'muster {sub} --help' does not list")
    for sub in sections:
        if sub not in sub_flags:
            problem(f"{page}:{sections[sub][0]}", f"section 'muster {sub}' names no subcommand "
                    "of muster --help")


# --- 4. the README's table of commands ------------------------------------------------------

def check_readme_table(readme, subcommands):
    rows = {}
    with open(readme, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = re.match(r"^\|\s*`muster ([\w-]+)`\s*\|", line)
            if m:
                rows.setdefault(m.group(1), number)
    if not rows:
        problem(readme, "no table of commands (rows beginning '| `muster SUB` |')")
        return
    first = min(rows.values())
    for sub in subcommands:
        if sub not in rows:
            problem(f"{readme}:{first}", f"the table of commands has no row for 'muster {sub}', "
                    "which 'muster --help' lists")
    for sub, line in rows.items():
        if sub not in subcommands:
            problem(f"{readme}:{line}", f"the table of commands names 'muster {sub}', which "
                    "'muster --help' does not list")


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    muster, readme, page, *more = sys.argv[1:]
    top_help = help_text(muster, [])
    sub_flags = {sub: flags_in_help(help_text(muster, [sub])) for sub in subcommands_in_help(top_help)}
    if not sub_flags:
        sys.exit(f"check_docs: '{muster} --help' lists no subcommands")
    blocks = []
    for markdown in [readme, *more]:
        for lang, start, text in code_blocks(markdown):
            blocks.append((lang, start, text))
            if lang in ("sh", "bash", "shell"):
                check_shell_block(markdown, start, text, muster, top_help, sub_flags)
            elif lang in ("python", "py"):
                check_python_block(markdown, start, text)
    check_man_page(page, sub_flags)
    check_readme_table(readme, list(sub_flags))
    for line in problems:
        print(line)
    shells = sum(lang in ("sh", "bash", "shell") for lang, _, _ in blocks)
    pythons = sum(lang in ("python", "py") for lang, _, _ in blocks)
    print(f"check_docs: {shells} shell and {pythons} python blocks of {readme}"
          f"{f' and {len(more)} more files' if more else ''}, "
          f"{len(sub_flags)} subcommands against {page}: "
          f"{len(problems) or 'no'} problem{'s' if len(problems) != 1 else ''}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
