#!/usr/bin/python3
"""Never a crash: runs `mmc check` on truncated and byte-mutated copies of the
stdlib files and requires exit status 0 or 1 (no signal, no hang, no 2).
Usage: mutate.py MMC STDLIB_DIR [COUNT [FIRST]]: mutants FIRST to FIRST + COUNT - 1
of the one sequence seed 1234 makes (tests/mutate_check.sh gives each build
its own range)."""
import os, random, shutil, subprocess, sys, tempfile
from concurrent.futures import ThreadPoolExecutor

def main():
    mmc, stdlib = sys.argv[1], sys.argv[2]
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
    first = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    rng = random.Random(1234)
    files = sorted(f for f in os.listdir(stdlib) if f.endswith(".mm"))
    tmp = tempfile.mkdtemp(prefix="mmc-mutate-")
    jobs = []
    tokens = [b"{", b"}", b"(", b")", b"[", b"]", b"x", b"=", b"param", b"\n", b"//", b"/*", b"\"", b"0",
              b"-1", b"99999999999999999999", b"1e400", b"**", b"@", b":", b",", b"import", b"model", b"let"]
    for i in range(first + count):
        name = files[i % len(files)]
        data = open(os.path.join(stdlib, name), "rb").read()
        kind = i % 4
        if kind == 0:  # truncation
            data = data[: rng.randrange(len(data))]
        elif kind == 1:  # random bytes
            data = bytearray(data)
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            data = bytes(data)
        elif kind == 2:  # token insertions and deletions
            for _ in range(rng.randint(1, 4)):
                pos = rng.randrange(len(data))
                if rng.random() < 0.5:
                    data = data[:pos] + rng.choice(tokens) + data[pos:]
                else:
                    data = data[:pos] + data[pos + rng.randint(1, 12):]
        else:  # digit changes (sizes, hyper-parameters)
            data = bytearray(data)
            digits = [k for k, c in enumerate(data) if 48 <= c <= 57]
            for _ in range(rng.randint(1, 3)):
                data[rng.choice(digits)] = rng.choice(b"0123456789")
            data = bytes(data)
        if i < first:  # made only to draw the same random numbers
            continue
        d = os.path.join(tmp, "c%05d" % i)
        os.mkdir(d)
        for f in files:  # siblings so that imports resolve to the originals
            if f != name:
                os.symlink(os.path.join(stdlib, f), os.path.join(d, f))
        with open(os.path.join(d, name), "wb") as fp:
            fp.write(data)
        jobs.append(os.path.join(d, name))

    def run(path):
        try:
            r = subprocess.run([mmc, "check", path], capture_output=True, timeout=30)
        except subprocess.TimeoutExpired:
            return (path, "hang (30 s)")
        if r.returncode not in (0, 1):
            return (path, "exit status %d\n%s" % (r.returncode, r.stderr.decode(errors="replace")[-3000:]))
        return None

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        bad = [b for b in ex.map(run, jobs) if b]
    for path, why in bad[:10]:
        keep = os.path.join(tempfile.gettempdir(), "mmc-crash-" + os.path.basename(os.path.dirname(path)) + ".mm")
        shutil.copy(path, keep)
        print("FAIL %s (kept as %s): %s" % (path, keep, why))
    shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (len(jobs) - len(bad), len(bad)))
    return 1 if bad else 0

if __name__ == "__main__":
    sys.exit(main())
