package sqlite

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// The writer's WAL writes, coalesced.
//
// SQLite writes a commit's WAL frames one system call at a time, two a frame (the 24-byte frame
// header, then the page), all at consecutive offsets, and then syncs the file. A group commit
// here writes some dozens of frames, so the writer spent about a fifth of its time entering and
// leaving pwrite (docs/benchmarks.md). The VFS registered here is the platform's own with one
// difference: a WAL file it opens keeps consecutive writes in a buffer and writes them out in a
// few calls (up to 124 KiB each) before its sync, and before anything else reads, sizes,
// truncates or closes the file (SQLite calls no other method of a WAL file but file controls,
// which only an application reaches). A write that does not continue the buffer writes the
// buffer out first, so every byte reaches the file in the order SQLite wrote it, and all of a
// commit's bytes reach it before the sync that makes the commit durable. Other SQLite
// connections see a commit only once the WAL index says so, which SQLite updates after that
// sync; they read the WAL with their own file handles.
//
// Only the writer opens the database through it (WriterDSN), one connection, with
// synchronous=FULL (open checks), so every commit syncs its WAL. The buffering needs that: with
// synchronous=NORMAL a commit would be visible to readers before its frames were written. So it
// needs SQLite's default powersafe overwrite (no psow=0 in the DSN): without it SQLite pads a
// commit to a sector boundary and syncs in the middle of its last frame, writing the rest after
// the sync.

// walBufVFSName is the name walBufVFS is registered under.
const walBufVFSName = "channels-walbuf"

// walBufSize is the most a WAL file's buffer holds; a larger run is written in parts.
const walBufSize = 1 << 20

// walFile is what walBufVFS keeps for an open WAL file, after the platform VFS's own file
// structure (SQLite allocates szOsFile bytes for each).
type walFile struct {
	methods sqlite3.Tsqlite3_io_methods // the file's methods: the platform's, some wrapped
	orig    uintptr                     // the platform's methods (*sqlite3_io_methods)
	buf     uintptr                     // the buffer (walBufSize bytes from sqlite3_malloc64)
	// The bytes buf[start:end] wait to be written at file offset off. After a failed write they
	// stay (start past the parts that were written), for the next flush.
	start, end int32
	off        int64
}

var walBuf struct {
	base   uintptr // the platform's VFS (*sqlite3_vfs)
	baseSz uintptr // its szOsFile, rounded up to 8
	// writes counts the writes SQLite made to WAL files through walBufVFS, writesOut the
	// writes that went to the platform's VFS for them.
	writes, writesOut atomic.Int64
	// failWrites makes every write out fail as on a full disk (tests).
	failWrites atomic.Bool
}

// registerWALBufVFS registers walBufVFS once per process.
var registerWALBufVFS = sync.OnceValue(func() error {
	tls := libc.NewTLS()
	defer tls.Close()
	base := sqlite3.Xsqlite3_vfs_find(tls, 0)
	if base == 0 {
		return fmt.Errorf("sqlite: no default VFS")
	}
	bv := (*sqlite3.Tsqlite3_vfs)(ptr(base))
	walBuf.base = base
	walBuf.baseSz = (uintptr(bv.FszOsFile) + 7) &^ 7
	v := sqlite3.Xsqlite3_malloc64(tls, uint64(unsafe.Sizeof(sqlite3.Tsqlite3_vfs{})))
	name, err := libc.CString(walBufVFSName)
	if v == 0 || err != nil {
		return fmt.Errorf("sqlite: register the WAL VFS: out of memory")
	}
	nv := (*sqlite3.Tsqlite3_vfs)(ptr(v))
	*nv = *bv
	nv.FpNext = 0
	nv.FzName = name
	nv.FszOsFile = int32(walBuf.baseSz + unsafe.Sizeof(walFile{}))
	nv.FxOpen = funcPtr(walBufOpen)
	if rc := sqlite3.Xsqlite3_vfs_register(tls, v, 0); rc != sqlite3.SQLITE_OK {
		return fmt.Errorf("sqlite: register the WAL VFS: code %d", rc)
	}
	return nil
})

// ptr turns an address SQLite allocated (outside the Go heap) into a pointer.
func ptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// funcPtr is f as SQLite holds a function pointer: the address of its func value.
func funcPtr[F any](f F) uintptr { return *(*uintptr)(unsafe.Pointer(&f)) }

func walFileOf(pFile uintptr) *walFile { return (*walFile)(ptr(pFile + walBuf.baseSz)) }

func walBufOpen(tls *libc.TLS, pVfs, zName, pFile uintptr, flags int32, pOutFlags uintptr) int32 {
	base := (*sqlite3.Tsqlite3_vfs)(ptr(walBuf.base))
	rc := (*(*func(*libc.TLS, uintptr, uintptr, uintptr, int32, uintptr) int32)(unsafe.Pointer(&base.FxOpen)))(tls, walBuf.base, zName, pFile, flags, pOutFlags)
	if rc != sqlite3.SQLITE_OK || flags&sqlite3.SQLITE_OPEN_WAL == 0 {
		return rc
	}
	f := (*sqlite3.Tsqlite3_file)(ptr(pFile))
	if f.FpMethods == 0 {
		return rc
	}
	buf := sqlite3.Xsqlite3_malloc64(tls, walBufSize)
	if buf == 0 {
		return rc // unbuffered, as the platform's
	}
	w := walFileOf(pFile)
	*w = walFile{orig: f.FpMethods, buf: buf}
	w.methods = *(*sqlite3.Tsqlite3_io_methods)(ptr(f.FpMethods))
	w.methods.FxClose = funcPtr(walBufClose)
	w.methods.FxRead = funcPtr(walBufRead)
	w.methods.FxWrite = funcPtr(walBufWrite)
	w.methods.FxTruncate = funcPtr(walBufTruncate)
	w.methods.FxSync = funcPtr(walBufSync)
	w.methods.FxFileSize = funcPtr(walBufFileSize)
	f.FpMethods = uintptr(unsafe.Pointer(&w.methods))
	return rc
}

// origMethods are the platform's methods of the file.
func (w *walFile) origMethods() *sqlite3.Tsqlite3_io_methods {
	return (*sqlite3.Tsqlite3_io_methods)(ptr(w.orig))
}

func (w *walFile) writeOut(tls *libc.TLS, pFile, z uintptr, n int32, off int64) int32 {
	walBuf.writesOut.Add(1)
	if walBuf.failWrites.Load() {
		return sqlite3.SQLITE_FULL
	}
	return (*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&w.origMethods().FxWrite)))(tls, pFile, z, n, off)
}

// maxWriteOut is the most one write of the platform's VFS takes: the unix VFS masks a write's
// length with 0x1ffff.
const maxWriteOut = 0x1f000

// flush writes the buffer out, in parts of at most maxWriteOut. What a failed write leaves
// stays buffered, and the error is returned: to SQLite, from whatever method needed the buffer
// written (a sync, a read), so it neither reports a commit durable nor reads the file while
// bytes it wrote are not in it. The next flush writes them again, at the same offsets, before
// anything later.
func (w *walFile) flush(tls *libc.TLS, pFile uintptr) int32 {
	for w.start < w.end {
		part := min(w.end-w.start, maxWriteOut)
		if rc := w.writeOut(tls, pFile, w.buf+uintptr(w.start), part, w.off); rc != sqlite3.SQLITE_OK {
			return rc
		}
		w.start += part
		w.off += int64(part)
	}
	w.start, w.end = 0, 0
	return sqlite3.SQLITE_OK
}

func walBufWrite(tls *libc.TLS, pFile, z uintptr, amt int32, off int64) int32 {
	walBuf.writes.Add(1)
	if amt > maxWriteOut {
		// SQLite writes a frame header or a page (at most 64 KiB) at a time; the platform's
		// write could not take more in one call either.
		return sqlite3.SQLITE_IOERR_WRITE
	}
	w := walFileOf(pFile)
	if w.start < w.end && (w.off+int64(w.end-w.start) != off || int64(w.end)+int64(amt) > walBufSize) {
		if rc := w.flush(tls, pFile); rc != sqlite3.SQLITE_OK {
			return rc
		}
	}
	if w.start == w.end {
		w.start, w.end, w.off = 0, 0, off
	}
	copy(unsafe.Slice((*byte)(ptr(w.buf+uintptr(w.end))), amt), unsafe.Slice((*byte)(ptr(z)), amt))
	w.end += amt
	return sqlite3.SQLITE_OK
}

func walBufSync(tls *libc.TLS, pFile uintptr, flags int32) int32 {
	w := walFileOf(pFile)
	if rc := w.flush(tls, pFile); rc != sqlite3.SQLITE_OK {
		return rc
	}
	return (*(*func(*libc.TLS, uintptr, int32) int32)(unsafe.Pointer(&w.origMethods().FxSync)))(tls, pFile, flags)
}

func walBufRead(tls *libc.TLS, pFile, z uintptr, amt int32, off int64) int32 {
	w := walFileOf(pFile)
	if rc := w.flush(tls, pFile); rc != sqlite3.SQLITE_OK {
		return rc
	}
	return (*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&w.origMethods().FxRead)))(tls, pFile, z, amt, off)
}

func walBufTruncate(tls *libc.TLS, pFile uintptr, size int64) int32 {
	w := walFileOf(pFile)
	if rc := w.flush(tls, pFile); rc != sqlite3.SQLITE_OK {
		return rc
	}
	return (*(*func(*libc.TLS, uintptr, int64) int32)(unsafe.Pointer(&w.origMethods().FxTruncate)))(tls, pFile, size)
}

func walBufFileSize(tls *libc.TLS, pFile, pSize uintptr) int32 {
	w := walFileOf(pFile)
	if rc := w.flush(tls, pFile); rc != sqlite3.SQLITE_OK {
		return rc
	}
	return (*(*func(*libc.TLS, uintptr, uintptr) int32)(unsafe.Pointer(&w.origMethods().FxFileSize)))(tls, pFile, pSize)
}

func walBufClose(tls *libc.TLS, pFile uintptr) int32 {
	w := walFileOf(pFile)
	rc := w.flush(tls, pFile)
	orig := w.origMethods()
	if crc := (*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&orig.FxClose)))(tls, pFile); rc == sqlite3.SQLITE_OK {
		rc = crc
	}
	sqlite3.Xsqlite3_free(tls, w.buf)
	w.buf = 0
	return rc
}
