"""Documentation that cannot drift (issue 30, point 9).

- docs/configuration.md documents every key the config loader accepts, and no key it
  refuses (except the clearly marked "planned" list). The accepted keys are read from the
  loader's Swift source (`Sources/QuickwayCore/Config/ConfigLoader.swift`) by following
  which `YAMLMapReader` variable stands for which section; every key a reader asks for
  (`top.string("workers")`, `a.map("admin")`, `positive(p, "interval")`, ...) is accepted,
  and every other key is refused by `finish()` as "unknown key".
- Every relative link in README.md, docs/configuration.md, ARCHITECTURE.md, CONTRIBUTING.md
  and the benchmark pages resolves to a file of the repository (and, for a link to a
  heading of a Markdown file, to a heading).

Needs no binary."""
import glob
import os
import re
import urllib.parse

import pytest

from harness import ROOT

LOADER = os.path.join(ROOT, "Sources", "QuickwayCore", "Config", "ConfigLoader.swift")
# The loader is split by section: ConfigLoader.swift and its ConfigLoader+*.swift extensions.
LOADER_FILES = sorted(glob.glob(os.path.join(os.path.dirname(LOADER), "ConfigLoader*.swift")))
DOC = os.path.join(ROOT, "docs", "configuration.md")
PLANNED_HEADING = re.compile(r"^## Planned", re.M)

# YAMLMapReader methods that read a key (and so mark it as known to `finish()`).
ACCESSORS = ("string", "value", "int", "bytes", "bool", "duration", "percent", "choice",
             "stringList", "list", "map", "node")
KEY_PATH = re.compile(r"[a-z0-9_]+(?:\[\]|\.<name>|\.[a-z0-9_]+)*")


class LoaderParseError(AssertionError):
    pass


def _strip_comments(src):
    # Whole-line comments only: a `//` inside a string ("http://") must stay.
    return "\n".join("" if line.lstrip().startswith("//") else line for line in src.splitlines())


def _matching(text, open_at):
    """Index of the bracket closing the one at `open_at` (string literals skipped)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack, i, in_str = [], open_at, False
    while i < len(text):
        c = text[i]
        if in_str:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return i
        i += 1
    raise LoaderParseError(f"unbalanced bracket at offset {open_at}")


def _split_top(text):
    """Splits an argument or parameter list on its top-level commas."""
    parts, depth, cur, in_str, i = [], 0, "", False, 0
    while i < len(text):
        c = text[i]
        if in_str:
            cur += c
            if c == "\\":
                cur += text[i + 1]
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            cur += c
        elif c in "([{":
            depth += 1
            cur += c
        elif c in ")]}":
            depth -= 1
            cur += c
        elif c == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += c
        i += 1
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _functions(src):
    """name -> (params [(label, name, type)], body text)."""
    heads = list(re.finditer(r"^[ \t]*(?:(?:public|private|fileprivate|internal|static)\s+)*func\s+(\w+)\s*\(", src, re.M))
    funcs = {}
    for n, h in enumerate(heads):
        close = _matching(src, h.end() - 1)
        params = []
        for p in _split_top(src[h.end():close]):
            names, _, typ = p.partition(":")
            words = names.split()
            params.append((words[0], words[-1], typ.split("=")[0].strip()))
        end = heads[n + 1].start() if n + 1 < len(heads) else len(src)
        name = h.group(1)
        if name in funcs:
            # Overloads (`load(file:)`, `load(yaml:)`): kept apart; one taking a reader
            # would make call sites ambiguous.
            if any(p[2] == "YAMLMapReader" for p in params + funcs[name][0]):
                raise LoaderParseError(f"overloaded {name} takes a YAMLMapReader: call sites are ambiguous")
            name = f"{name}#{n}"
        funcs[name] = (params, src[close:end])
    return funcs


def _child(base, key):
    return key if base == "" else f"{base}.{key}"


def loader_keys(paths=None):
    """Every key path the loader accepts -> {"kinds": set of accessors, "choices": [...], "range": (lo, hi)}."""
    src = "\n".join(_strip_comments(open(p).read()) for p in (paths or LOADER_FILES))
    funcs = _functions(src)
    reader_params = {name: [i for i, p in enumerate(params) if p[2] == "YAMLMapReader"] for name, (params, _) in funcs.items()}
    # Wrappers such as `positive(_ m: YAMLMapReader, _ key: String)`: an accessor whose key is an argument.
    helpers = {}
    for name, (params, body) in funcs.items():
        readers = [p[1] for p in params if p[2] == "YAMLMapReader"]
        strings = [p[1] for p in params if p[2] == "String"]
        for r in readers:
            for s in strings:
                m = re.search(rf"\b{r}\.({'|'.join(ACCESSORS)})\(\s*{s}\s*\)", body)
                if m:
                    helpers[name] = ([i for i, p in enumerate(params) if p[1] == r][0], [i for i, p in enumerate(params) if p[1] == s][0], m.group(1))
    keys = {}

    def record(path, kind, rest):
        entry = keys.setdefault(path, {"kinds": set(), "choices": None, "range": None})
        entry["kinds"].add(kind)
        if kind == "choice":
            m = re.match(r"\s*,\s*[\w.]+\.self\s*,\s*\[([^\]]*)\]", rest)
            if not m:
                raise LoaderParseError(f"{path}: cannot read the options of choice()")
            entry["choices"] = re.findall(r'"([^"]*)"', m.group(1))
        if kind == "int":
            m = re.match(r"\s*,\s*in:\s*([\d_]+)\s*\.\.\.\s*([\d_]+)", rest)
            if not m:
                raise LoaderParseError(f"{path}: cannot read the range of int()")
            entry["range"] = (int(m.group(1).replace("_", "")), int(m.group(2).replace("_", "")))

    events = re.compile(
        r"(?P<for_enum>\bfor\s+\(\s*\w+\s*,\s*(?P<fe_node>\w+)\s*\)\s+in\s+(?P<fe_list>\w+)\.enumerated\(\))"
        r"|(?P<for_keys>\bfor\s+(?P<fk_var>\w+)\s+in\s+(?P<fk_reader>\w+)\.keys\b)"
        r"|(?P<construct>\blet\s+(?P<c_var>\w+)\s*=\s*YAMLMapReader\(\s*(?P<c_node>\w+)\s*,\s*path:\s*(?P<c_path>[^,]+?)\s*,\s*sink:)"
        r"|(?P<bind>\b(?:let|var)\s+(?P<b_var>\w+)\s*(?::\s*[\w.\[\]<>?]+\s*)?=)"
        r"|(?P<access>(?<![\w.$])(?P<a_recv>\$?\w+)\??\.(?P<a_kind>" + "|".join(ACCESSORS) + r")\(\s*(?:\"(?P<a_lit>[^\"\\]*)\"|(?P<a_id>\w+)))"
        r"|(?P<call>(?<![\w.])(?P<call_name>\w+)\()"
    )

    done, work = set(), []
    for name, (params, _) in funcs.items():
        if not reader_params[name] and name not in helpers:
            work.append((name, ()))
    while work:
        name, roots = work.pop()
        if (name, roots) in done:
            continue
        done.add((name, roots))
        params, body = funcs[name]
        readers = dict(roots)           # variable -> section path
        lists = {}                      # variable -> path of a list of maps
        nodes = {}                      # variable -> path of one list entry
        keyvars = {}                    # variable -> path of the map whose keys it runs over
        for ev in events.finditer(body):
            if ev.group("for_enum"):
                node, lst = ev.group("fe_node"), ev.group("fe_list")
                nodes.pop(node, None)
                if lst in lists:
                    nodes[node] = lists[lst] + "[]"
            elif ev.group("for_keys"):
                var, reader = ev.group("fk_var"), ev.group("fk_reader")
                if reader in readers:
                    keyvars[var] = readers[reader]
            elif ev.group("construct"):
                var, node, path_arg = ev.group("c_var"), ev.group("c_node"), ev.group("c_path")
                if path_arg == '""':
                    readers[var] = ""
                elif node in nodes:
                    readers[var] = nodes[node]
                else:
                    raise LoaderParseError(f"{name}: cannot tell which section YAMLMapReader({node}, path: {path_arg}) reads")
                # The path the loader reports must be the one derived here.
                lit = re.fullmatch(r'"([^"]*)"', path_arg)
                sub = re.fullmatch(r'(\w+)\.childPath\("(\w+)"\)\s*\+\s*"\[\\\(\w+\)\]"', path_arg)
                if lit:
                    shown = re.sub(r"\\\(\w+\)", "", lit.group(1))
                elif sub and sub.group(1) in readers:
                    shown = _child(readers[sub.group(1)], sub.group(2)) + "[]"
                else:
                    shown = readers[var]
                if shown != readers[var]:
                    raise LoaderParseError(f"{name}: reader {var} reports {shown!r} but reads {readers[var]!r}")
            elif ev.group("bind"):
                var = ev.group("b_var")
                rest = body[ev.end():]
                # `let a = top.map("admin")` binds a reader; `let t = top.map("x").flatMap {...}` does not.
                m = re.match(r"\s*(\w+)\.(map|list)\(\s*(?:\"([^\"\\]*)\"|(\w+))\s*\)(?!\s*[.?!])", rest)
                for env in (readers, lists, nodes, keyvars):
                    env.pop(var, None)
                if m and m.group(1) in readers:
                    base = readers[m.group(1)]
                    key = m.group(3) if m.group(3) is not None else ("<name>" if keyvars.get(m.group(4)) == base else None)
                    if key is None:
                        raise LoaderParseError(f"{name}: {var} = {m.group(0).strip()}: key not understood")
                    (readers if m.group(2) == "map" else lists)[var] = _child(base, key)
            elif ev.group("access"):
                recv, kind = ev.group("a_recv"), ev.group("a_kind")
                if recv not in readers:
                    if ev.group("a_lit") is not None:
                        raise LoaderParseError(f"{name}: {recv}.{kind}(\"{ev.group('a_lit')}\"): {recv} is no reader this test knows")
                    continue
                if name in helpers:
                    continue
                base = readers[recv]
                if ev.group("a_lit") is not None:
                    key = ev.group("a_lit")
                elif keyvars.get(ev.group("a_id")) == base:
                    key = "<name>"
                else:
                    raise LoaderParseError(f"{name}: {recv}.{kind}({ev.group('a_id')}): key not understood")
                record(_child(base, key), kind, body[ev.end():])
            elif ev.group("call"):
                callee = ev.group("call_name")
                if callee not in funcs or (not reader_params[callee] and callee not in helpers):
                    continue
                open_at = ev.end() - 1
                args = _split_top(body[open_at + 1:_matching(body, open_at)])
                args = [re.sub(r"^\w+:\s*", "", a) for a in args]

                def reader_of(arg):
                    if arg in readers:
                        return readers[arg]
                    if arg == "$0":
                        m = re.search(r"(\w+)\.map\(\s*\"([^\"]+)\"\s*\)\s*\.(?:flatMap|map)\s*\{\s*$", body[:ev.start()])
                        if m and m.group(1) in readers:
                            return _child(readers[m.group(1)], m.group(2))
                    raise LoaderParseError(f"{name}: cannot tell which section {callee}({', '.join(args)}) reads")

                if callee in helpers:
                    r_i, k_i, kind = helpers[callee]
                    lit = re.fullmatch(r'"([^"]*)"', args[k_i])
                    if not lit:
                        raise LoaderParseError(f"{name}: {callee}({', '.join(args)}): key not a literal")
                    record(_child(reader_of(args[r_i]), lit.group(1)), kind, "")
                else:
                    work.append((callee, tuple((funcs[callee][0][i][1], reader_of(args[i])) for i in reader_params[callee])))
    unreached = [n for n in funcs if reader_params[n] and n not in helpers and not any(d[0] == n for d in done)]
    if unreached:
        raise LoaderParseError(f"functions reading config never reached from load(): {unreached}")
    if len(keys) < 60:
        raise LoaderParseError(f"only {len(keys)} keys found in the loader: the extraction is broken ({sorted(keys)})")
    return keys


def doc_tables(path=DOC):
    """(documented rows {key: cells}, planned keys) from docs/configuration.md."""
    text = open(path).read()
    m = PLANNED_HEADING.search(text)
    assert m, "docs/configuration.md has no '## Planned' section"
    main, planned = text[:m.start()], text[m.start():]
    rows = {}
    for line in main.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if not cells or not cells[0].startswith("`"):
            continue
        key = cells[0].strip("`")
        assert KEY_PATH.fullmatch(key), f"table row with a malformed key: {line}"
        assert key not in rows, f"{key} documented twice"
        assert len(cells) == 4, f"{key}: expected | key | type | default | meaning |, got {line}"
        rows[key] = cells
    planned_keys = {k for k in re.findall(r"`([^`]+)`", planned) if KEY_PATH.fullmatch(k) and ("." in k or "[]" in k)}
    return rows, planned_keys


@pytest.fixture(scope="module")
def accepted():
    return loader_keys()


def test_loader_extraction_sees_known_keys(accepted):
    # A few keys from every way the loader reads them, so a broken extraction shows here first.
    for key in ("listen", "workers", "admin.listen", "admin.token_env", "tls_listen.certificates[].cert_file",
                "http2.h2c", "limits.drain_timeout", "log.level", "auth.keys[].secret_env", "auth.max_skew",
                "cache.stale_if_error", "redis.url", "redis.timeout", "services.<name>.probe.interval",
                "services.<name>.ip_list.refresh", "routes[].match.path_prefix", "routes[].match.methods",
                "routes[].cache.vary", "routes[].websocket", "routes[].websocket.heartbeat"):
        assert key in accepted, f"{key} not extracted from the loader"
    assert accepted["services.<name>.probe.interval"]["kinds"] == {"duration"}
    assert accepted["log.level"]["choices"] == ["debug", "info", "warn", "error"]


def test_every_accepted_key_is_documented(accepted):
    rows, _ = doc_tables()
    missing = sorted(set(accepted) - set(rows))
    assert not missing, f"keys the loader accepts but docs/configuration.md does not document: {missing}"


def test_every_documented_key_is_accepted(accepted):
    rows, planned = doc_tables()
    extra = sorted(set(rows) - set(accepted))
    assert not extra, f"keys documented in docs/configuration.md that the loader refuses (move them to 'Planned'): {extra}"
    landed = sorted(planned & set(accepted))
    assert not landed, f"keys listed as planned that the loader now accepts (document them): {landed}"


TYPE_WORDS = {"duration": "duration", "bytes": "size", "bool": "bool", "percent": "percent", "int": "integer",
              "map": "map", "list": "list", "stringList": "list"}


def test_documented_types_match_the_loader(accepted):
    rows, _ = doc_tables()
    wrong = []
    for key, info in accepted.items():
        if key not in rows:
            continue
        typ = rows[key][1]
        for kind in info["kinds"]:
            word = TYPE_WORDS.get(kind)
            if word and word not in typ:
                wrong.append(f"{key}: read as {kind}, type says {typ!r}")
        for option in info["choices"] or []:
            if f"`{option}`" not in typ:
                wrong.append(f"{key}: option {option} missing from {typ!r}")
        if info["range"] and "{}-{}".format(*info["range"]) not in typ:
            wrong.append(f"{key}: range {info['range'][0]}-{info['range'][1]} missing from {typ!r}")
    assert not wrong, "\n".join(wrong)


def test_readme_and_default_config_point_to_the_reference():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "(docs/configuration.md)" in readme
    assert "spec/config.md" not in readme
    assert "docs/configuration.md" in open(os.path.join(ROOT, "config.yaml")).read()


# --- relative links ---------------------------------------------------------------

def _without_code(text):
    """Text with fenced blocks and inline code spans blanked (lines kept)."""
    out, fence = [], None
    for line in text.splitlines():
        m = re.match(r"\s*(```+|~~~+)", line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            out.append("")
            continue
        if m:
            fence = m.group(1)
            out.append("")
            continue
        out.append(re.sub(r"(`+).*?\1", "", line))
    return "\n".join(out)


def _slugs(path):
    """GitHub's heading anchors of a Markdown file."""
    seen, slugs = {}, set()
    for line in _without_code(open(path).read()).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs


def relative_links(path):
    """Relative link targets of a Markdown file, outside code (a code span in a link's
    text is blanked, which leaves the link itself: `[](target)`)."""
    text = _without_code(open(path).read())
    targets = re.findall(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
    targets += re.findall(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", text, re.M)
    return [t for t in targets if not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", t) and not t.startswith("#")]


@pytest.mark.parametrize("doc", ["README.md", "docs/configuration.md", "ARCHITECTURE.md", "BENCHMARKS.md",
                                 "docs/benchmarks-history.md", "CONTRIBUTING.md"])
def test_relative_links_resolve(doc):
    path = os.path.join(ROOT, doc)
    broken = []
    for target in sorted(set(relative_links(path))):
        file_part, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), urllib.parse.unquote(file_part)))
        if not resolved.startswith(ROOT + os.sep) and resolved != ROOT:
            broken.append(f"{target}: outside the repository")
        elif not os.path.exists(resolved):
            broken.append(f"{target}: no such file")
        elif anchor and resolved.endswith(".md") and anchor not in _slugs(resolved):
            broken.append(f"{target}: no heading #{anchor} in {os.path.relpath(resolved, ROOT)}")
    assert not broken, f"broken relative links in {doc}:\n" + "\n".join(broken)


def test_link_checker_sees_links():
    # The checker itself: it must find the README's known links, or it checks nothing.
    links = relative_links(os.path.join(ROOT, "README.md"))
    assert "ARCHITECTURE.md" in links and "docs/configuration.md" in links, links
