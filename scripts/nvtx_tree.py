#!/usr/bin/env python3
"""nvtx_tree.py NCU_OUTPUT: asserts prefill-bench's NVTX range tree in the text
that `ncu --nvtx` prints (its default details page; one block per profiled
kernel with the thread's "NVTX Push/Pop Stack"). Every kernel launch of the
tool must lie inside exactly domain `prefill-bench` > `scenario <name>` >
`L<i> attn|gdn` > `<kernel entry>`, each range once (the issue saw "L0 attn"
inside "L0 attn"). The harness's own kernels (buffer fills) lie outside the
entry ranges and are skipped. Exit 0 when every kernel's stack is right, 1 when
one is not (each problem printed), 2 on bad usage or when no kernel was found.
The parser (parse_ncu_nvtx) reads the format Nsight Compute printed on the H200
(tests/nvtx/ncu-nvtx-good.txt is that output, recorded there on 2026-12-03).
Stdlib only."""
import re
import sys

DOMAIN = "prefill-bench"
ENTRIES = {"rope", "kv_write", "attention", "conv1d", "gdn", "attn_layer", "ssm_layer"}
HARNESS_KERNELS = re.compile(r"fill", re.IGNORECASE)
# "  rope_kernel(args) (16, 4, 1)x(128, 1, 1), Context 1, Stream 13, Device 0, CC 9.0"
KERNEL_HEADER = re.compile(r"^\s{0,4}(\S.*?)\s+\(\d+,\s*\d+,\s*\d+\)x\(\d+,\s*\d+,\s*\d+\),\s*Context\s+\d+")
STACK_HEADER = re.compile(r"NVTX Push/Pop Stack", re.IGNORECASE)
# A stack entry "<level,message>" (ncu prints the domain the same way, first).
STACK_ENTRY = re.compile(r"^\s*<\s*(\d+)\s*,\s*(.*?)\s*>\s*$")
SECTION = re.compile(r"^\s*(Section:|NVTX Start/End|----)")
LAYER = re.compile(r"^L\d+ (attn|gdn)$")


def kernel_name(header):
    """"rope_kernel(float*, int)" -> "rope_kernel"; templates keep their name."""
    for anon in ("(anonymous namespace)::", "<unnamed>::", "unnamed>::"):  # ncu prints the last
        header = header.replace(anon, "")
    name = header.split("(", 1)[0].strip()
    return name.split()[-1] if name else header


def parse_ncu_nvtx(text):
    """[(kernel, {domain: [range, ...]})] in launch order, outermost range first.
    In a stack, a "<i,name>" entry indented no deeper than the current domain's
    starts a domain; deeper entries are that domain's ranges, outermost first."""
    kernels = []
    current = None
    in_stack = False
    domain, domain_indent = None, -1
    for line in text.splitlines():
        m = KERNEL_HEADER.match(line)
        if m and not line.lstrip().startswith("<"):
            current = (kernel_name(m.group(1)), {})
            kernels.append(current)
            in_stack = False
            continue
        if current is None:
            continue
        if STACK_HEADER.search(line):
            in_stack, domain, domain_indent = True, None, -1
            continue
        if not in_stack or not line.strip():
            continue
        if SECTION.match(line):
            in_stack = False
            continue
        e = STACK_ENTRY.match(line)
        indent = len(line) - len(line.lstrip())
        if not e:
            # ncu 2025 on the H200 prints the domain as a bare name above its
            # "<level,message>" ranges; attributes ("ASCII: ...", "RGB: ...") have a colon.
            if ":" not in line:
                domain, domain_indent = line.strip(), indent
                current[1].setdefault(domain, [])
            continue
        if domain is None or indent <= domain_indent:
            domain, domain_indent = e.group(2), indent
            current[1].setdefault(domain, [])
        else:
            current[1][domain].append(e.group(2))
    return kernels


def check(kernels):
    """Problems (strings) and the number of tool kernels checked."""
    problems, checked = [], 0
    for i, (name, stacks) in enumerate(kernels):
        if HARNESS_KERNELS.search(name):
            continue
        checked += 1
        ranges = stacks.get(DOMAIN)
        where = f"kernel #{i} {name}"
        if ranges is None:
            problems.append(f"{where}: not inside the {DOMAIN} domain (domains: {sorted(stacks) or 'none'})")
            continue
        path = " > ".join(ranges)
        if len(ranges) != len(set(ranges)):
            problems.append(f"{where}: a range pushed twice: {path}")
            continue
        if len(ranges) != 3:
            problems.append(f"{where}: expected scenario > layer > kernel, found {len(ranges)} ranges: {path}")
            continue
        scenario, layer, entry = ranges
        if not scenario.startswith("scenario "):
            problems.append(f"{where}: outermost range '{scenario}' is not 'scenario <name>'")
        if not LAYER.match(layer):
            problems.append(f"{where}: layer range '{layer}' is not 'L<i> attn|gdn'")
        if entry not in ENTRIES:
            problems.append(f"{where}: kernel range '{entry}' is not an entry ({', '.join(sorted(ENTRIES))})")
    return problems, checked


def main(argv):
    if len(argv) != 2:
        print("usage: nvtx_tree.py NCU_OUTPUT", file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        print(f"nvtx_tree: {e}", file=sys.stderr)
        return 2
    kernels = parse_ncu_nvtx(text)
    problems, checked = check(kernels)
    if checked == 0:
        print(f"nvtx_tree: {argv[1]}: no kernel of the tool with an NVTX stack found "
              f"({len(kernels)} kernel blocks): was ncu run with --nvtx?", file=sys.stderr)
        return 2
    for p in problems:
        print(f"nvtx_tree: {p}")
    if problems:
        print(f"nvtx_tree: FAIL, {len(problems)} problem(s) in {checked} kernels")
        return 1
    print(f"nvtx_tree: PASS, {checked} kernels each inside {DOMAIN} > scenario > layer > kernel, none doubled")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
