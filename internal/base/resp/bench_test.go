package resp

import (
	"bufio"
	"bytes"
	"testing"
)

func BenchmarkAppendSetCommand(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 128)
	key, tok := []byte("lock:orders:42"), []byte("3f2504e0-4f89-11d3-9a0c-0305e82c3301")
	for i := 0; i < b.N; i++ {
		buf = AppendArrayHeader(buf[:0], 6)
		buf = AppendBulkString(buf, "SET")
		buf = AppendBulk(buf, key)
		buf = AppendBulk(buf, tok)
		buf = AppendBulkString(buf, "NX")
		buf = AppendBulkString(buf, "PX")
		buf = AppendBulkInt(buf, 30000)
	}
}

// Reading the replies a backend sends for lock commands.
func BenchmarkReadLockReplies(b *testing.B) {
	b.ReportAllocs()
	replies := bytes.Repeat([]byte("+OK\r\n$-1\r\n:1\r\n:0\r\n"), 64)
	r := bytes.NewReader(replies)
	br := bufio.NewReaderSize(r, 64<<10)
	rd := NewReader(br, ReaderLimits{})
	b.SetBytes(int64(len(replies)) / 256)
	for i := 0; i < b.N; i++ {
		if _, err := rd.Read(); err != nil {
			r.Reset(replies)
			br.Reset(r)
			rd.Read()
		}
	}
}
