#!/usr/bin/env python3
"""The layer contract of docs/ARCHITECTURE.md, checked (Python 3 standard library only).

The table under "## Layers" in docs/ARCHITECTURE.md names each layer (a folder under src/), its
library and what it depends on. In the "depends on" column, comma-separated, a name that is a
layer of the table is a dependency on that layer; anything else (oneDNN, Open MPI, CUDA 13, ...)
is an external library and is not checked; text in parentheses is commentary. Each row may depend
only on rows above it (the libraries link bottom-up, so there is no cycle).

  includes  Every `#include "..."` of every C++ file (.h .cc .cu .cuh) under src/, apps/, bench/
            and tests/ that names a header of a layer (src/<layer>/...) must name its own layer or
            one the file may use:
              src/<layer>/...  the layer's dependencies, transitively (if model depends on kernels
                               and kernels on core, model may include core). A folder inside a
                               layer's folder belongs to that layer unless the table makes it a
                               layer of its own (kernels/cpu is kernels; kernels/cuda is a layer).
              apps/, bench/, tests/  what the CMake targets that compile the file link, again
                               transitively: for a source file every target that compiles it, for
                               a header every target that compiles a source including it (through
                               other such headers); a file in several targets gets what all of
                               them link (the intersection).
            A file of a layer may not include headers of apps/, bench/ or tests/.
  links     The project libraries each layer's library links in the CMakeLists.txt files
            (strata_layer(... DEPS ...), target_link_libraries) are exactly the table's "depends
            on" of that row: direct dependencies, not the transitive closure. Also: every folder
            under src/ with sources is (inside) a layer of the table, and every .cc/.cu under
            src/ is compiled into its layer's library and no other.

CMake is read, not run: the full configuration (not STRATA_LAYERS_ONLY) with every optional part
(CUDA, NCCL, Python) present, so the CUDA layers are checked on machines without nvcc.

Usage: scripts/check_layers.py [--root DIR] [--only includes|links] [--rules]
Exit status: 0 when the tree keeps the contract, 1 on a violation (each printed as file:line,
what, and the rule), 2 when the table or the CMake files cannot be read.
"""
import argparse
import glob
import os
import re
import sys

SOURCE_EXTS = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh")
COMPILED_EXTS = (".cc", ".cpp", ".cu")
SCANNED_DIRS = ("src", "apps", "bench", "tests")
TABLE_HEADING = "## Layers"


class ContractError(Exception):
    """The table or a CMake file could not be understood (exit 2)."""


# --- the table --------------------------------------------------------------------------------


def split_top_level(text, sep=","):
    """Splits on `sep` outside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def strip_parentheses(text):
    out, depth = [], 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def find_table(lines, arch_rel, columns, required=True):
    """The rows, as (line number, cells), of the first table in the layer heading's section whose
    header is `columns` ([] when there is none and it is not required)."""
    start = next((i for i, l in enumerate(lines) if l.startswith(TABLE_HEADING)), None)
    if start is None:
        raise ContractError(f"{arch_rel}: no heading starting with '{TABLE_HEADING}'")
    i = start + 1
    while i < len(lines) and not lines[i].startswith("## "):
        if lines[i].startswith("|"):
            header = [c.strip().lower() for c in lines[i].strip().strip("|").split("|")]
            if header == columns:
                rows, i = [], i + 2  # past the |---| line
                while i < len(lines) and lines[i].startswith("|"):
                    cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                    if len(cells) < len(columns):
                        raise ContractError(f"{arch_rel}:{i + 1}: a row with fewer than "
                                            f"{len(columns)} cells")
                    rows.append((i + 1, cells))
                    i += 1
                return rows
        i += 1
    if not required:
        return []
    raise ContractError(f"{arch_rel}:{start + 1}: no table with the columns "
                        f"{' | '.join(columns)} under the layer heading")


def layer_names(cell, names, root, arch_rel, line, what):
    """The layers a comma-separated cell names (parenthesised text is commentary); the other
    entries (external libraries) are returned second."""
    deps, externals = [], []
    if cell.strip() in ("", "—", "-", "none"):
        return deps, externals
    for entry in split_top_level(cell):
        name = strip_parentheses(entry).replace("`", "").strip()
        if not name:
            continue
        word = name.split()[0]
        if word in names:
            deps.append(word)
        elif os.path.isdir(os.path.join(root, "src", word)):
            raise ContractError(f"{arch_rel}:{line}: {what} names '{word}', a folder under src/ "
                                "that is not a layer of the table")
        else:
            externals.append(name)
    return deps, externals


def parse_table(root, arch_rel):
    """Rows of the layer table (dicts with layer, library, deps, line) and of the table of test
    binaries that link more than their layer (dicts with layer, binary, extra, line)."""
    path = os.path.join(root, arch_rel)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    raw = []
    for line, cells in find_table(lines, arch_rel, ["layer", "library", "owns", "depends on"]):
        # The "owns" text may itself hold a `|`: the first two cells and the last one are fixed.
        raw.append((line, cells[0].strip("` "), cells[1], cells[-1]))
    names = [r[1] for r in raw]
    rows = []
    for line, layer, library_cell, deps_cell in raw:
        m = re.search(r"`(strata_\w+)`", library_cell)
        if not m:
            raise ContractError(f"{arch_rel}:{line}: layer {layer}: no `strata_...` library named "
                                "in the library column")
        deps, externals = layer_names(deps_cell, names, root, arch_rel, line,
                                      f"layer {layer}'s \"depends on\"")
        rows.append({"layer": layer, "library": m.group(1), "deps": deps,
                     "externals": externals, "line": line})
    if not rows:
        raise ContractError(f"{arch_rel}: the layer table has no rows")
    tests = []
    # The test table is optional: without it every layer test binary links its layer only.
    for line, cells in find_table(lines, arch_rel, ["tests", "binary", "also links"], False):
        layer = cells[0].strip("` ")
        m = re.search(r"`(strata_test_\w+)`", cells[1])
        if layer not in names or not m:
            raise ContractError(f"{arch_rel}:{line}: a row of the test table needs a layer and a "
                                "`strata_test_...` binary")
        extra, others = layer_names(cells[-1], names, root, arch_rel, line,
                                    f"the test table's row for {layer}")
        if others:
            raise ContractError(f"{arch_rel}:{line}: the test table's row for {layer} names "
                                f"{others}, which are not layers")
        tests.append({"layer": layer, "binary": m.group(1), "extra": extra, "line": line})
    return rows, tests


# --- C++ includes -----------------------------------------------------------------------------

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def strip_comments(text):
    """Blanks comments (keeping line breaks) so that an #include in a comment is not one."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or
                                                                      text[i - 1] == "_")):
            k = text.find("(", i + 2)
            delim = text[i + 2:k] if k >= 0 else ""
            end = text.find(")" + delim + '"', k + 1) if k >= 0 else -1
            end = n if end < 0 else end + len(delim) + 2
            out.append("\n" * text.count("\n", i, end))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def includes_of(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = strip_comments(f.read())
    result = []
    for lineno, line in enumerate(text.split("\n"), 1):
        m = INCLUDE_RE.match(line)
        if m:
            result.append((lineno, m.group(1)))
    return result


# --- CMake ------------------------------------------------------------------------------------


def cmake_commands(path):
    """(name, args, line) of each command of a CMake file; args are raw tokens (quoted ones keep
    a leading '"' marker so that they are not list-split)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    cmds, i, n, line = [], 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c == "#":
            if text.startswith("#[[", i):
                j = text.find("]]", i)
                j = n if j < 0 else j + 2
            else:
                j = text.find("\n", i)
                j = n if j < 0 else j
            line += text.count("\n", i, j)
            i = j
        elif c.isalpha() or c == "_":
            m = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").match(text, i)
            name = m.group(0).lower()
            j = m.end()
            while j < n and text[j] in " \t":
                j += 1
            if j >= n or text[j] != "(":
                raise ContractError(f"{path}:{line}: cannot read the CMake command '{name}'")
            start_line = line
            args, depth, j, tok = [], 1, j + 1, []

            def flush():
                if tok:
                    args.append("".join(tok))
                    tok.clear()
            while j < n and depth > 0:
                ch = text[j]
                if ch == "\n":
                    line += 1
                if ch == '"':
                    flush()
                    k = j + 1
                    buf = []
                    while k < n and text[k] != '"':
                        if text[k] == "\\" and k + 1 < n:
                            buf.append(text[k:k + 2])
                            k += 2
                            continue
                        if text[k] == "\n":
                            line += 1
                        buf.append(text[k])
                        k += 1
                    args.append('"' + "".join(buf))
                    j = k + 1
                    continue
                if ch == "#" and not tok:
                    k = text.find("\n", j)
                    j = n if k < 0 else k
                    continue
                if ch in " \t\r\n":
                    flush()
                elif ch == "(":
                    flush()
                    depth += 1
                    args.append("(")
                elif ch == ")":
                    flush()
                    depth -= 1
                    if depth > 0:
                        args.append(")")
                else:
                    tok.append(ch)
                j += 1
            cmds.append((name, args, start_line))
            i = j
        else:
            i += 1
    return cmds


class CMakeModel:
    """What the CMake files build: targets with their sources, links and include folders."""

    def __init__(self, root):
        self.root = root
        self.targets = {}  # name -> {"sources", "links": [(lib, file, line)], "incdirs", "where"}
        self._run_dir(root, {"CMAKE_SOURCE_DIR": root}, set())

    def rel(self, path):
        return os.path.relpath(path, self.root).replace(os.sep, "/")

    def _expand(self, token, vars_):
        prev = None
        while prev != token:
            prev = token
            token = re.sub(r"\$\{([A-Za-z0-9_]*)\}", lambda m: vars_.get(m.group(1), ""), token)
        return token

    def _values(self, args, vars_):
        out = []
        for a in args:
            if a.startswith('"'):
                out.append(self._expand(a[1:], vars_))
            else:
                out.extend(v for v in self._expand(a, vars_).split(";") if v != "")
        return out

    @staticmethod
    def _condition(values):
        """True/False where the configuration decides it, None (both branches) otherwise."""
        if "STRATA_LAYERS_ONLY" in values:
            k = values.index("STRATA_LAYERS_ONLY")
            return k > 0 and values[k - 1] == "NOT"
        return None

    def _target(self, name, where):
        return self.targets.setdefault(name, {"sources": set(), "links": [], "incdirs": set(),
                                              "where": where})

    def _sources(self, values, cur):
        out = set()
        for v in values:
            if v.startswith("$<") or v in ("PRIVATE", "PUBLIC", "INTERFACE"):
                continue
            p = v if os.path.isabs(v) else os.path.join(cur, v)
            for q in (sorted(glob.glob(p)) if any(ch in p for ch in "*?[") else [p]):
                q = os.path.normpath(q)
                if q.startswith(self.root + os.sep) and os.path.isfile(q):
                    out.add(self.rel(q))
        return out

    def _run_dir(self, cur, parent_vars, seen):
        listfile = os.path.join(cur, "CMakeLists.txt")
        if listfile in seen or not os.path.isfile(listfile):
            raise ContractError(f"{self.rel(listfile)}: missing or added twice")
        seen.add(listfile)
        vars_ = dict(parent_vars)
        vars_["CMAKE_CURRENT_SOURCE_DIR"] = cur
        vars_["CMAKE_CURRENT_LIST_DIR"] = cur
        self._run(cmake_commands(listfile), vars_, cur, self.rel(listfile), seen)

    def _run(self, cmds, vars_, cur, where, seen):
        """Interprets cmds; returns True when a return() was reached."""
        i = 0
        while i < len(cmds):
            name, args, line = cmds[i]
            if name in ("function", "macro"):
                end = "end" + name
                depth, i = 1, i + 1
                while depth:
                    if i >= len(cmds):
                        raise ContractError(f"{where}:{line}: {name} without {end}")
                    depth += {name: 1, end: -1}.get(cmds[i][0], 0)
                    i += 1
                continue
            if name in ("if", "foreach", "while"):
                block, i = self._block(cmds, i, where)
                if name == "if":
                    if self._run_if(block, vars_, cur, where, seen):
                        return True
                elif name == "foreach":
                    vals = self._values(args, vars_)
                    var, items = vals[0], vals[1:]
                    if items[:1] == ["RANGE"]:
                        items = ["0"]
                    elif items[:1] in (["IN"],):
                        items = [x for k in items[2:] for x in vars_.get(k, "").split(";") if x] \
                            if items[1:2] == ["LISTS"] else items[2:]
                    for item in items:
                        vars_[var] = item
                        if self._run(block[1:-1], vars_, cur, where, seen):
                            return True
                continue  # while: not used by the project; skipped
            if name == "return":
                return True
            self._command(name, self._values(args, vars_), args, vars_, cur, where, line, seen)
            i += 1
        return False

    @staticmethod
    def _block(cmds, i, where):
        opener = cmds[i][0]
        closer = "end" + opener
        depth, j = 0, i
        while j < len(cmds):
            if cmds[j][0] == opener:
                depth += 1
            elif cmds[j][0] == closer:
                depth -= 1
                if depth == 0:
                    return cmds[i:j + 1], j + 1
            j += 1
        raise ContractError(f"{where}:{cmds[i][2]}: {opener} without {closer}")

    def _run_if(self, block, vars_, cur, where, seen):
        # Branches at depth 0 of this if: (condition or None for else, commands).
        branches, depth, start = [], 0, 0
        cond = block[0][1]
        for k in range(1, len(block)):
            n = block[k][0]
            if n == "if":
                depth += 1
            elif n == "endif":
                if depth == 0:
                    branches.append((cond, block[start + 1:k]))
                depth -= 1
            elif n in ("elseif", "else") and depth == 0:
                branches.append((cond, block[start + 1:k]))
                cond = block[k][1] if n == "elseif" else None
                start = k
        for cond_args, body in branches:
            decided = True if cond_args is None else self._condition(self._values(cond_args,
                                                                                  vars_))
            if decided is False:
                continue
            if self._run(body, vars_, cur, where, seen):
                return True
            if decided is True:
                break
        return False

    def _command(self, name, vals, raw, vars_, cur, where, line, seen):
        if name == "set" and vals:
            rest = [v for v in vals[1:] if v != "PARENT_SCOPE"]
            if "CACHE" in rest:
                rest = rest[:rest.index("CACHE")]
            vars_[vals[0]] = ";".join(rest)
        elif name == "list" and len(vals) >= 2 and vals[0] == "APPEND":
            old = vars_.get(vals[1], "")
            vars_[vals[1]] = ";".join(([old] if old else []) + vals[2:])
        elif name == "file" and vals and vals[0] in ("GLOB", "GLOB_RECURSE"):
            pats = [v for v in vals[2:] if v not in ("CONFIGURE_DEPENDS", "LIST_DIRECTORIES")]
            found = set()
            for p in pats:
                p = p if os.path.isabs(p) else os.path.join(cur, p)
                if vals[0] == "GLOB_RECURSE":
                    p = os.path.join(os.path.dirname(p), "**", os.path.basename(p))
                found |= {os.path.normpath(q) for q in glob.glob(p, recursive=True)
                          if os.path.isfile(q)}
            vars_[vals[1]] = ";".join(sorted(found))
        elif name == "get_filename_component" and len(vals) >= 3:
            base = os.path.basename(vals[1])
            vars_[vals[0]] = {"NAME": base, "NAME_WE": base.split(".")[0],
                              "DIRECTORY": os.path.dirname(vals[1])}.get(vals[2], "")
        elif name == "add_subdirectory" and vals:
            self._run_dir(os.path.normpath(os.path.join(cur, vals[0])), vars_, seen)
        elif name in ("add_executable", "add_library") and vals:
            t = self._target(vals[0], f"{where}:{line}")
            kinds = ("STATIC", "SHARED", "OBJECT", "INTERFACE", "MODULE", "EXCLUDE_FROM_ALL",
                     "WIN32", "MACOSX_BUNDLE", "IMPORTED", "ALIAS", "GLOBAL")
            t["sources"] |= self._sources([v for v in vals[1:] if v not in kinds], cur)
        elif name == "target_sources" and vals:
            self._target(vals[0], f"{where}:{line}")["sources"] |= self._sources(vals[1:], cur)
        elif name == "target_link_libraries" and vals:
            t = self._target(vals[0], f"{where}:{line}")
            t["links"] += [(v, where, line) for v in vals[1:]
                           if v not in ("PRIVATE", "PUBLIC", "INTERFACE")]
        elif name == "target_include_directories" and vals:
            t = self._target(vals[0], f"{where}:{line}")
            for v in vals[1:]:
                if v not in ("PRIVATE", "PUBLIC", "INTERFACE", "SYSTEM", "BEFORE", "AFTER"):
                    t["incdirs"].add(os.path.normpath(v if os.path.isabs(v)
                                                      else os.path.join(cur, v)))
        elif name == "strata_layer" and vals:
            # src/CMakeLists.txt's function: strata_layer(name DIRS folder... DEPS library...)
            # builds strata_<name> from DIRS/*.cc, with src/ as its include folder.
            t = self._target("strata_" + vals[0], f"{where}:{line}")
            key, dirs, deps = None, [], []
            for v in vals[1:]:
                if v in ("DIRS", "DEPS"):
                    key = v
                elif key == "DIRS":
                    dirs.append(v)
                elif key == "DEPS":
                    deps.append(v)
            t["sources"] |= self._sources([os.path.join(cur, d, "*.cc") for d in dirs], cur)
            t["links"] += [(d, where, line) for d in deps]
            t["incdirs"].add(cur)


# --- the checks -------------------------------------------------------------------------------


class Checker:
    def __init__(self, root, arch_rel):
        self.root = os.path.abspath(root)
        self.arch_rel = arch_rel
        self.rows, self.test_rows = parse_table(self.root, arch_rel)
        self.by_layer = {r["layer"]: r for r in self.rows}
        self.by_library = {r["library"]: r["layer"] for r in self.rows}
        self.cmake = CMakeModel(self.root)
        self.problems = []
        self.allowed = {}
        self._closures()

    def problem(self, where, text):
        self.problems.append(f"{where}: {text}")

    def _closures(self):
        order = {r["layer"]: k for k, r in enumerate(self.rows)}
        for r in self.rows:
            allowed = {r["layer"]}
            for d in r["deps"]:
                if order[d] >= order[r["layer"]]:
                    self.problem(f"{self.arch_rel}:{r['line']}",
                                 f"layer {r['layer']} depends on {d}, which is not above it in "
                                 "the table (rows link bottom-up: each depends only on rows "
                                 "above it)")
                    continue
                allowed |= self.allowed[d]
            self.allowed[r["layer"]] = allowed

    def layer_of(self, rel):
        """The layer of a path under src/ (the longest layer folder containing it), or None."""
        if not rel.startswith("src/"):
            return None
        inner = rel[len("src/"):]
        best = None
        for layer in self.by_layer:
            if inner.startswith(layer + "/") and (best is None or len(layer) > len(best)):
                best = layer
        return best

    def target_layers(self, name, seen=None):
        """The layers a CMake target links directly, through the project's own non-layer
        targets (`strata`, the interface target of them all)."""
        seen = seen if seen is not None else set()
        out = set()
        for lib, _, _ in self.cmake.targets.get(name, {}).get("links", []):
            if lib in self.by_library:
                out.add(self.by_library[lib])
            elif lib in self.cmake.targets and lib not in seen:
                seen.add(lib)
                out |= self.target_layers(lib, seen)
        return out

    def target_allowed(self, name):
        out = set()
        for layer in self.target_layers(name):
            out |= self.allowed[layer]
        return out

    def files(self):
        out = []
        for top in SCANNED_DIRS:
            for dirpath, dirnames, filenames in os.walk(os.path.join(self.root, top)):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for fn in sorted(filenames):
                    if fn.endswith(SOURCE_EXTS):
                        out.append(os.path.relpath(os.path.join(dirpath, fn),
                                                   self.root).replace(os.sep, "/"))
        return out

    def resolve(self, rel, inc, extra_dirs):
        """The repository path an include names, or None (an external or generated header)."""
        cands = [os.path.join(self.root, os.path.dirname(rel), inc),
                 os.path.join(self.root, "src", inc)]
        if not rel.startswith("src/"):
            cands += [os.path.join(self.root, "tests", inc)]
            cands += [os.path.join(d, inc) for d in sorted(extra_dirs)]
        for c in cands:
            c = os.path.normpath(c)
            if c.startswith(self.root + os.sep) and os.path.isfile(c):
                return os.path.relpath(c, self.root).replace(os.sep, "/")
        return None

    def rule_text(self, layer):
        r = self.by_layer[layer]
        deps = ", ".join(r["deps"]) or "nothing"
        return (f"{layer} depends on {deps} ({self.arch_rel}:{r['line']}); with what those depend "
                f"on it may include {self.fmt(self.allowed[layer])}")

    @staticmethod
    def fmt(layers):
        return "{" + ", ".join(sorted(layers)) + "}" if layers else "no layer"

    def check_includes(self, report_outside=True):
        files = self.files()
        if report_outside:
            for rel in files:
                if rel.startswith("src/") and self.layer_of(rel) is None:
                    self.problem(rel, "a source under src/ outside every layer folder of the "
                                 f"table ({self.arch_rel})")
        test_incdirs = set()
        for t in self.cmake.targets.values():
            test_incdirs |= {d for d in t["incdirs"]
                             if not os.path.relpath(d, self.root).startswith("src")}
        incs, resolved = {}, {}
        for rel in files:
            incs[rel] = includes_of(os.path.join(self.root, rel))
            resolved[rel] = [(ln, inc, self.resolve(rel, inc, test_incdirs))
                             for ln, inc in incs[rel]]
        checked = 0
        # src/: by the file's layer.
        for rel in files:
            if not rel.startswith("src/"):
                continue
            layer = self.layer_of(rel)
            if layer is None:
                continue  # reported by check_links (and below when it does not run)
            for ln, inc, target in resolved[rel]:
                if target is None:
                    continue
                checked += 1
                if not target.startswith("src/"):
                    self.problem(f"{rel}:{ln}", f'#include "{inc}" ({target}): layer {layer} may '
                                 "include only headers of layers (src/), not of apps, bench or "
                                 "tests")
                    continue
                other = self.layer_of(target)
                if other is not None and other not in self.allowed[layer]:
                    self.problem(f"{rel}:{ln}", f'#include "{inc}" is a header of layer {other}, '
                                 f"which layer {layer} may not include: {self.rule_text(layer)}")
        # apps/, bench/, tests/: by the CMake targets compiling them.
        consumers = {rel: set() for rel in files if not rel.startswith("src/")}
        compiled = {}
        for name, t in self.cmake.targets.items():
            for s in t["sources"]:
                compiled.setdefault(s, set()).add(name)
        for rel in consumers:
            if rel.endswith(COMPILED_EXTS) and rel in compiled:
                # This source's targets reach every non-layer header it includes, transitively.
                stack, seen = [rel], {rel}
                while stack:
                    f = stack.pop()
                    consumers[f] |= compiled[rel]
                    for _, _, target in resolved.get(f, []):
                        if target in consumers and target not in seen:
                            seen.add(target)
                            stack.append(target)
        for rel, targets in sorted(consumers.items()):
            if not targets:
                if rel.endswith(COMPILED_EXTS):
                    self.problem(rel, "no CMake target compiles this file, so nothing says which "
                                 "layers it may include")
                continue  # a header no compiled file includes: nothing to check it against
            for ln, inc, target in resolved[rel]:
                if target is None or not target.startswith("src/"):
                    continue
                checked += 1
                other = self.layer_of(target)
                if other is None:
                    continue
                refusing = [t for t in sorted(targets) if other not in self.target_allowed(t)]
                if refusing:
                    why = "; ".join(f"{t} links {self.fmt(self.target_layers(t))}, which with "
                                    f"their dependencies allow {self.fmt(self.target_allowed(t))}"
                                    for t in refusing)
                    self.problem(f"{rel}:{ln}", f'#include "{inc}" is a header of layer {other}, '
                                 f"which a CMake target compiling this file does not link: {why}")
        return len(files), checked

    def check_links(self):
        t = self.cmake.targets
        for r in self.rows:
            lib, layer = r["library"], r["layer"]
            where_table = f"{self.arch_rel}:{r['line']}"
            if not os.path.isdir(os.path.join(self.root, "src", layer)):
                self.problem(where_table, f"layer {layer} is not a folder under src/")
            if lib not in t:
                self.problem(where_table, f"layer {layer}'s library {lib} is not built by any "
                             "CMakeLists.txt")
                continue
            linked = {}
            for name, where, line in t[lib]["links"]:
                if name in self.by_library:
                    linked.setdefault(self.by_library[name], f"{where}:{line}")
                elif name in t and name != lib:
                    self.problem(f"{where}:{line}", f"{lib} links the project target {name}, "
                                 "which is not a layer's library of the table")
            for dep in sorted(set(linked) - set(r["deps"])):
                self.problem(linked[dep], f"{lib} links {self.by_layer[dep]['library']} "
                             f"(layer {dep}), but the table's \"depends on\" for {layer} "
                             f"({where_table}) does not list {dep}")
            for dep in sorted(set(r["deps"]) - set(linked)):
                self.problem(where_table, f"the table says {layer} depends on {dep}, but "
                             f"{lib} ({t[lib]['where']}) does not link "
                             f"{self.by_layer[dep]['library']}")
        # A layer's test binary (strata_test_<layer>) links that layer, and so what it depends on;
        # what it links beyond that is exactly its row of the test table.
        extras = {r["binary"]: r for r in self.test_rows}
        for r in self.rows:
            binary = "strata_test_" + r["layer"]
            row = extras.get(binary)
            if binary not in t:
                if row:
                    self.problem(f"{self.arch_rel}:{row['line']}", f"{binary} is not built by any "
                                 "CMakeLists.txt")
                continue
            linked = self.target_layers(binary)
            where = t[binary]["where"]
            if r["layer"] not in self.target_allowed(binary):
                self.problem(where, f"{binary} does not link its layer's library {r['library']}, "
                             "directly or through another layer")
            beyond = linked - self.allowed[r["layer"]]
            listed = set(row["extra"]) if row else set()
            where_row = f"{self.arch_rel}:{row['line']}" if row else self.arch_rel
            for layer in sorted(beyond - listed):
                self.problem(where, f"{binary} links layer {layer}, beyond {r['layer']} and what "
                             f"it depends on, and the test table ({where_row}) does not say so")
            for layer in sorted(listed - beyond):
                self.problem(where_row, f"the test table says {binary} also links {layer}, but "
                             + ("that is already a dependency of its layer"
                                if layer in self.allowed[r["layer"]] else "CMake does not link it"))
        for row in self.test_rows:
            if row["binary"] != "strata_test_" + row["layer"]:
                self.problem(f"{self.arch_rel}:{row['line']}", f"the test table's binary "
                             f"{row['binary']} is not strata_test_{row['layer']}")
        # Every source folder under src/ is inside a layer, every source of src/ in its layer's
        # library only.
        compiled = {}
        for name, tgt in t.items():
            for s in tgt["sources"]:
                compiled.setdefault(s, set()).add(name)
        for dirpath, dirnames, filenames in os.walk(os.path.join(self.root, "src")):
            dirnames.sort()
            for fn in sorted(filenames):
                if not fn.endswith(SOURCE_EXTS):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, fn), self.root).replace(os.sep, "/")
                layer = self.layer_of(rel)
                if layer is None:
                    self.problem(rel, "a source under src/ outside every layer folder of the "
                                 f"table ({self.arch_rel})")
                    continue
                if not fn.endswith(COMPILED_EXTS):
                    continue
                lib = self.by_layer[layer]["library"]
                into = compiled.get(rel, set())
                wrong = sorted(into - {lib})
                if wrong:
                    self.problem(rel, f"layer {layer}'s source is compiled into {', '.join(wrong)}"
                                 f", not only its layer's library {lib}")
                elif lib not in into:
                    self.problem(rel, f"layer {layer}'s source is not compiled into {lib}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   ".."))
    ap.add_argument("--architecture", default="docs/ARCHITECTURE.md")
    ap.add_argument("--only", choices=("includes", "links"))
    ap.add_argument("--rules", action="store_true",
                    help="print each layer's dependencies and what it may include, then check")
    args = ap.parse_args()
    try:
        c = Checker(args.root, args.architecture)
    except (ContractError, OSError) as e:
        print(f"check_layers: {e}", file=sys.stderr)
        return 2
    if args.rules:
        for r in c.rows:
            print(f"{r['layer']:13} {r['library']:17} depends on "
                  f"{', '.join(r['deps']) or '-':40} may include {c.fmt(c.allowed[r['layer']])}")
    summary = []
    if args.only in (None, "links"):
        c.check_links()
        summary.append(f"{len(c.rows)} layers' link lines")
    if args.only in (None, "includes"):
        nfiles, nincs = c.check_includes(report_outside=args.only == "includes")
        summary.append(f"{nincs} project includes in {nfiles} files")
    for p in c.problems:
        print(p)
    if c.problems:
        print(f"check_layers: {len(c.problems)} violation(s) of the layer table in "
              f"{args.architecture} ({'; '.join(summary)} checked)")
        return 1
    print(f"check_layers: OK ({'; '.join(summary)} checked against {args.architecture})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
