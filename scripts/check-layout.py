#!/usr/bin/env python3
"""check-layout.py BUILD_DIR -- the walls between gpupool's libraries, checked.

Reads the build's CMake file-API code model (the top-level CMakeLists.txt asks
for it) and the sources, and fails when:

  1. two libraries export the same symbol (a program that links both does not
     link; `nm -g --defined-only` on each libgp_*.a);
  2. two headers under src/ share a base name (includes are bare names, so the
     include path would pick one of them by accident);
  3. a file includes a header of a library that its own library does not link
     (an arrow running up or sideways: the link line must state every
     direction), or two libraries link each other;
  4. a library's CMakeLists.txt globs its sources instead of listing them.

Run by ctest as the `layout` test, so `make test` (and CI) keeps the walls up.
Exit 0 when all hold, 1 with one line per violation, 2 on a usage error.
"""
import glob
import json
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# Contract headers: names only (macros), no code, no project include. Every
# library may include them without linking their folder's library -- the
# container contract is one of them because libgpupool-cuda, loaded into
# users' containers, links nothing of the project yet must spell the names
# the device plugin writes (docs/poolapi.md). Checked to stay that way.
CONTRACT_HEADERS = {"src/poolapi/poolapi_names.h"}
CONTRACT_LINE = re.compile(r'^\s*(#\s*(define|ifndef|endif)\b.*|#\s*include\s*<[a-z0-9_/]+\.h>\s*)?$')


def load_codemodel(build):
    reply = os.path.join(build, ".cmake", "api", "v1", "reply")
    indexes = sorted(glob.glob(os.path.join(reply, "index-*.json")))
    if not indexes:
        # CMake answers a query at the next configure: the first configure of
        # a fresh build directory only wrote it.
        query = os.path.join(build, ".cmake", "api", "v1", "query")
        os.makedirs(query, exist_ok=True)
        open(os.path.join(query, "codemodel-v2"), "a").close()
        subprocess.run(["cmake", build], check=True, stdout=subprocess.DEVNULL)
        indexes = sorted(glob.glob(os.path.join(reply, "index-*.json")))
    if not indexes:
        raise SystemExit(f"check-layout: no CMake file-API reply in {reply} (configure first)")
    with open(indexes[-1]) as f:
        index = json.load(f)
    model = next(o for o in index["objects"] if o["kind"] == "codemodel")
    with open(os.path.join(reply, model["jsonFile"])) as f:
        codemodel = json.load(f)
    targets = {}
    for ref in codemodel["configurations"][0]["targets"]:
        with open(os.path.join(reply, ref["jsonFile"])) as f:
            t = json.load(f)
        targets[t["id"]] = t
    return targets


def main(argv):
    if len(argv) != 2:
        print("usage: check-layout.py BUILD_DIR", file=sys.stderr)
        return 2
    build = os.path.abspath(argv[1])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    targets = load_codemodel(build)
    problems = []

    # Our libraries: static libraries whose sources live under src/.
    libs = {}  # name -> {"deps": set(names), "sources": [paths], "archive": path}
    by_id = {tid: t["name"] for tid, t in targets.items()}
    for t in targets.values():
        # Defined under src/: a test's PIC copy of a library is not a layer.
        if t["type"] != "STATIC_LIBRARY" or not t["paths"]["source"].startswith("src"):
            continue
        srcs = [s["path"] for s in t.get("sources", [])
                if s["path"].startswith("src/") and s["path"].endswith(".c")]
        if not srcs:
            continue
        deps = {by_id[d["id"]] for d in t.get("dependencies", []) if d["id"] in by_id}
        archive = os.path.join(build, t["artifacts"][0]["path"]) if t.get("artifacts") else None
        libs[t["name"]] = {"deps": deps, "sources": srcs, "archive": archive}

    # Which library a file belongs to: the one that compiles it; a header goes
    # with the .c of its stem, else with the lowest library of its folder.
    owner = {}
    for name, lib in libs.items():
        for s in lib["sources"]:
            owner[s] = name
    folder_libs = {}
    for name, lib in libs.items():
        for s in lib["sources"]:
            folder_libs.setdefault(os.path.dirname(s), set()).add(name)

    headers = {}  # base name -> [paths]
    for path in sorted(glob.glob(os.path.join(root, "src", "**", "*.h"), recursive=True)):
        rel = os.path.relpath(path, root)
        headers.setdefault(os.path.basename(rel), []).append(rel)
        stem_c = rel[:-2] + ".c"
        if stem_c in owner:
            owner[rel] = owner[stem_c]
            continue
        # Header-only: the library of its folder (or the nearest folder above
        # with one) that the folder's other libraries depend on.
        d = os.path.dirname(rel)
        while d and d not in folder_libs:
            d = os.path.dirname(d)
        cands = folder_libs.get(d, set())
        lowest = [c for c in cands if not (libs[c]["deps"] & cands)]
        if lowest:
            owner[rel] = sorted(lowest)[0]

    # Contract headers: defines, guards and system headers only (comments and
    # continuation lines aside).
    for rel in sorted(CONTRACT_HEADERS):
        with open(os.path.join(root, rel), errors="replace") as f:
            text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
        text = re.sub(r"\\\n", " ", text)
        for n, line in enumerate(text.splitlines(), 1):
            if not CONTRACT_LINE.match(line):
                problems.append(f"{rel} is a contract header (macros only) but has: {line.strip()}")
                break

    # 2. header base names
    for base, paths in sorted(headers.items()):
        if len(paths) > 1:
            problems.append(f"header name {base} is shipped twice: {', '.join(paths)}")

    # 3. include direction and cycles between libraries
    for a, la in libs.items():
        for b in la["deps"]:
            if b in libs and a in libs[b]["deps"]:
                if a < b:
                    problems.append(f"libraries {a} and {b} link each other")
    for rel, lib in sorted(owner.items()):
        with open(os.path.join(root, rel), errors="replace") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            paths = headers.get(os.path.basename(inc))
            if not paths or len(paths) != 1:
                continue  # generated, system-like, or already reported
            target = owner.get(paths[0])
            if target is None or target == lib or paths[0] in CONTRACT_HEADERS:
                continue
            if target not in libs[lib]["deps"]:
                problems.append(f"{rel} includes {paths[0]} ({target}), "
                                f"which {lib} does not link")

    # 1. exported symbols
    exported = {}
    for name, lib in sorted(libs.items()):
        if not lib["archive"] or not os.path.exists(lib["archive"]):
            problems.append(f"{name}: archive {lib['archive']} not built")
            continue
        out = subprocess.run(["nm", "-g", "--defined-only", lib["archive"]],
                             capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBRCVWGS":
                exported.setdefault(parts[2], set()).add(name)
    for sym, owners in sorted(exported.items()):
        if len(owners) > 1:
            problems.append(f"symbol {sym} is exported by {', '.join(sorted(owners))}")

    # 4. explicit source lists
    for cm in sorted(glob.glob(os.path.join(root, "src", "**", "CMakeLists.txt"), recursive=True)):
        with open(cm) as f:
            if re.search(r"file\s*\(\s*GLOB", f.read()):
                problems.append(f"{os.path.relpath(cm, root)} globs its sources; list them")

    for p in problems:
        print(f"check-layout: {p}")
    print(f"check-layout: {len(libs)} libraries, {len(headers)} headers, "
          f"{len(exported)} exported symbols, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
