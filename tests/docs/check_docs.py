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
5. Every default `muster SUB --help` gives (CLI11's "=VALUE", or "default VALUE" in the text)
   is said in muster.1's entry for that flag: the word "default" and the value.
6. muster.1's EXIT STATUS lists exactly the statuses demonstrated below (EXIT_STATUSES), and
   muster exits with each where the example is run on this machine.
7. Every manual page, set by groff at 80 columns as man(1) sets it, fits 80 columns.
Each problem is printed as FILE:LINE: what is wrong; the exit status is 1 when there is one.
"""
import ast
import builtins
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

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


# --- 5. defaults ---------------------------------------------------------------------------

def help_entries(text):
    """{flag: (its option column, its description)} of the help's Options section."""
    entries, in_options, current = {}, False, None
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line):
            in_options, current = line == "Options:", None
            continue
        if not in_options:
            continue
        m = re.match(r"^  (-\S+(?: \S+)*?)(?:\s{2,}(.*))?$", line)
        if m:
            current = [m.group(1), m.group(2) or ""]
            for flag in re.findall(r"-[\w-]+", m.group(1).split(" ")[0]):
                entries[flag] = current
        elif current is not None and line.startswith("   "):
            current[1] += " " + line.strip()
    return {flag: tuple(entry) for flag, entry in entries.items()}


def default_in_help(column, description):
    m = re.search(r"=(\S+)$", column)
    if m:
        return m.group(1)
    m = re.search(r"\b[Dd]efault:? (.+?)(?:[;,)]|\.(?:\s|$)|$)", description)
    return m.group(1).strip() if m else None


def section_title(line):
    return re.sub(r'^\.S[SH]\s+"?(.*?)"?\s*$', r"\1", line)


def option_entries(page):
    """{section title: {flag: (line, plain text)}} of every option entry (.TP) of the page, in
    the order of its sections: read once for every flag of every subcommand."""
    sections, entries, tag, start, text, after_tp = {}, None, None, 0, [], False

    def close():
        if tag is not None and entries is not None:
            for flag in FLAG.findall(tag):
                entries.setdefault(flag, (start, " ".join(text)))

    with open(page, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for number, line in enumerate(lines, 1):
        if line.startswith((".SH", ".SS")):
            close()
            tag, entries = None, sections.setdefault(section_title(line), {})
            continue
        if line.startswith((".TP", ".TQ")):
            close()
            tag, text, after_tp = None, [], True
            continue
        plain = roff_plain(re.sub(r"^\.[A-Z]{1,2}\s+", "", line)).replace('"', "")
        if after_tp:
            tag, start, after_tp = plain, number, False
        elif tag is not None:
            text.append(plain)
    close()
    return sections


def entry_for(sections, title, flag, seen=()):
    """The entry for FLAG in section TITLE, followed where it says "As in SECTION" or "as for
    SECTION" (options shared by several subcommands are described once)."""
    line, said = sections.get(title, {}).get(flag, (None, None))
    if said is None:
        return None, None
    m = re.search(r"\b[Aa]s (?:in|for)\s+(.*)$", said)
    if m and "default" not in said.lower():
        refers = [t for t in sections if m.group(1).startswith(t) and t not in seen]
        if refers:
            found = entry_for(sections, max(refers, key=len), flag, (*seen, title))
            if found[0] is not None:
                return found
    return line, said


def check_defaults(page, sub_help):
    """Returns the flags whose default was checked."""
    sections, checked = option_entries(page), []
    for sub, text in sub_help.items():
        for flag, (column, description) in sorted(help_entries(text).items()):
            default = default_in_help(column, description)
            if default is None or not flag.startswith("--"):
                continue
            line, said = entry_for(sections, f"muster {sub}", flag)
            if said is None:
                continue  # check_man_page names a flag the section lacks
            words = re.escape(default).replace("\\ ", r"\s+")
            checked.append(flag)
            if "default" not in said.lower() or not re.search(rf"(?<![\w.-]){words}(?![\w-])", said,
                                                              re.IGNORECASE):
                problem(f"{page}:{line}", f"'muster {sub} --help' gives {flag} the default "
                        f"'{default}', which the entry for {flag} does not say")
    return checked


# --- 6. exit statuses ------------------------------------------------------------------------

# Each status muster(1) documents, and a command on this machine alone that ends with it.
EXIT_STATUSES = {
    "0": (["run", "-n", "1", "--", "true"], 0),
    "1": (["health", "-f", "{expects_8_gpus}"], 1),  # a check failed: no GPU here
    "2": (["run", "-n", "0", "--", "true"], 2),
    "124": (["run", "-n", "1", "--timeout", "1", "--", "sleep", "30"], 124),
    "126": (["run", "-n", "1", "--", "/"], 126),
    "127": (["run", "-n", "1", "--", "/nonexistent/command"], 127),
    "128+N": (["run", "-n", "1", "--", "sh", "-c", "kill -TERM $$"], 128 + 15),
    "255": (["exec", "-H", "node.invalid", "--", "true"], 255),  # a name no resolver knows
    "other": (["run", "-n", "1", "--", "sh", "-c", "exit 3"], 3),
}


def documented_statuses(page):
    """{status: line} of the .TP tags of the page's EXIT STATUS section."""
    statuses, in_section, after_tp = {}, False, False
    with open(page, encoding="utf-8") as f:
        for number, line in enumerate(f.read().splitlines(), 1):
            if line.startswith(".SH"):
                in_section = re.match(r'^\.SH\s+"?EXIT STATUS"?\s*$', line) is not None
                continue
            if in_section and after_tp:
                statuses[roff_plain(re.sub(r"^\.[A-Z]{1,2}\s+", "", line)).strip()] = number
            after_tp = in_section and line.startswith(".TP")
    return statuses


def check_exit_statuses(page, muster):
    statuses = documented_statuses(page)
    if not statuses:
        problem(page, "no EXIT STATUS section with a .TP entry per status")
        return
    for status, line in statuses.items():
        if status not in EXIT_STATUSES:
            problem(f"{page}:{line}", f"EXIT STATUS lists {status}, which check_docs.py never "
                    "demonstrates: add a command to EXIT_STATUSES")
    with tempfile.TemporaryDirectory() as tmp:
        cluster = f"{tmp}/expects-8-gpus.yaml"
        with open(cluster, "w") as f:
            f.write("nodes: [{host: localhost}]\nexpect: {gpus_per_node: 8}\n")
        for status, (args, expected) in EXIT_STATUSES.items():
            if status not in statuses:
                problem(page, f"EXIT STATUS does not list {status}, which muster exits with: "
                        f"muster {' '.join(args)}")
                continue
            argv = [os.path.abspath(muster), *[a.replace("{expects_8_gpus}", cluster) for a in args]]
            run = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp)
            if run.returncode != expected:
                problem(f"{page}:{statuses[status]}", f"EXIT STATUS says {status}, but "
                        f"'muster {' '.join(args)}' exited {run.returncode}: {run.stderr[-300:]}")


# --- 7. the manual pages' width -------------------------------------------------------------

def pages_beside(page):
    """The other manual pages in the directory of `page` (muster-cluster.5 beside muster.1)."""
    return sorted(p for p in glob.glob(os.path.join(os.path.dirname(page), "*.[1-8]")) if p != page)


def check_width(page):
    # As man(1) sets a page for an 80-column terminal; tabs as the terminal expands them.
    run = subprocess.run(["groff", "-man", "-Tutf8", "-rLL=80n", "-rLT=80n", "-P-cbou", page],
                         capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        problem(page, f"groff could not set the page: {run.stderr.strip()}")
        return
    for number, line in enumerate(run.stdout.splitlines(), 1):
        if len(line.expandtabs()) > 80:
            problem(page, f"line {number} of the page as set is {len(line.expandtabs())} columns "
                    f"wide: {line.strip()[:60]}")


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
    defaults = check_defaults(page, {sub: help_text(muster, [sub]) for sub in sub_flags})
    check_exit_statuses(page, muster)
    for manual in [page, *pages_beside(page)]:
        check_width(manual)
    for line in problems:
        print(line)
    shells = sum(lang in ("sh", "bash", "shell") for lang, _, _ in blocks)
    pythons = sum(lang in ("python", "py") for lang, _, _ in blocks)
    print(f"check_docs: {shells} shell and {pythons} python blocks of {readme}"
          f"{f' and {len(more)} more files' if more else ''}, "
          f"{len(sub_flags)} subcommands, {len(defaults)} defaults and {len(EXIT_STATUSES)} exit "
          f"statuses against {page}: "
          f"{len(problems) or 'no'} problem{'s' if len(problems) != 1 else ''}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
