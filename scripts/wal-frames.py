#!/usr/bin/env python3
"""wal-frames.py STRACE_OUTPUT DATABASE — which b-trees a SQLite store's commits write.

Reads the output of
    strace -f -e trace=pwrite64,fsync -e signal=none -s 8 -xx -o STRACE_OUTPUT channels bench accept --store sqlite:///DATABASE ...
and prints, per commit, how many WAL frames (pages) each table or index took, averaged over the
last two thirds of the commits. Each WAL frame starts with a 24-byte header written by its own
pwrite: bytes 0-3 are the page number, bytes 4-7 are non-zero on a commit's last frame. Pages are
mapped to their b-tree with SQLite's dbstat virtual table on the database the run left behind.
"""
import collections
import re
import sqlite3
import sys

FRAME = re.compile(r'\d+\s+pwrite64\(\d+, "((?:\\x[0-9a-f]{2})+)"(?:\.\.\.)?, 24, \d+\)')


def commits(path):
    out, cur = [], []
    for line in open(path):
        m = FRAME.match(line)
        if not m:
            continue
        header = bytes(int(x, 16) for x in m.group(1).split('\\x')[1:])
        cur.append(int.from_bytes(header[:4], 'big'))
        if int.from_bytes(header[4:8], 'big'):
            out.append(cur)
            cur = []
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    cs = commits(sys.argv[1])
    if not cs:
        sys.exit('no WAL frames found: was strace run with -s 8 -xx?')
    sizes = sorted(len(c) for c in cs)
    print(f'{len(cs)} commits, {sum(sizes)} frames, median {sizes[len(sizes) // 2]} frames a commit')
    db = sqlite3.connect(f'file:{sys.argv[2]}?mode=ro', uri=True)
    owner = dict(db.execute('SELECT pageno, name FROM dbstat'))
    steady = cs[len(cs) // 3:]
    count = collections.Counter(owner.get(pg, '(freed since)') for c in steady for pg in c)
    for name, n in count.most_common():
        print(f'{n / len(steady):8.1f}  {name}')


if __name__ == '__main__':
    main()
