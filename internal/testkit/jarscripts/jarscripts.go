// Package jarscripts gives tests the Lua scripts a Java library carries as
// string constants in its classes, read at test time from the library's
// jar (the Maven class path integration/java's build writes), so that the
// tests run a library's exact text without the repository holding it.
//
// It promises only what it read: the text of each string constant of a
// class that starts as asked, in the order the class lists them.
package jarscripts

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// FindJar returns the entry of a class path file (entries separated by
// ':') whose file name starts with prefix and ends in .jar.
func FindJar(classpathFile, prefix string) (string, error) {
	b, err := os.ReadFile(classpathFile)
	if err != nil {
		return "", fmt.Errorf("class path: %w", err)
	}
	for _, p := range strings.Split(strings.TrimSpace(string(b)), string(os.PathListSeparator)) {
		if base := filepath.Base(p); strings.HasPrefix(base, prefix) && strings.HasSuffix(base, ".jar") {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s*.jar in %s", prefix, classpathFile)
}

// Strings returns the string constants of class (a path inside the jar,
// such as "org/example/Lock.class") that start with prefix.
func Strings(jar, class, prefix string) ([]string, error) {
	zr, err := zip.OpenReader(jar)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", jar, err)
	}
	defer zr.Close()
	for _, f := range zr.File {
		if f.Name != class {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", class, err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", class, err)
		}
		all, err := constants(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", class, err)
		}
		var out []string
		for _, s := range all {
			if strings.HasPrefix(s, prefix) {
				out = append(out, s)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("no %s in %s", class, jar)
}

// constants reads the UTF-8 entries of a class file's constant pool. The
// scripts are ASCII, which modified UTF-8 writes as UTF-8 does.
func constants(b []byte) ([]string, error) {
	r := bytes.NewReader(b)
	var head struct {
		Magic        uint32
		Minor, Major uint16
		Count        uint16
	}
	if err := binary.Read(r, binary.BigEndian, &head); err != nil || head.Magic != 0xCAFEBABE {
		return nil, errors.New("not a class file")
	}
	var out []string
	for i := 1; i < int(head.Count); i++ {
		tag, err := r.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("constant %d: %w", i, err)
		}
		skip := 0
		switch tag {
		case 1: // Utf8
			var n uint16
			if err := binary.Read(r, binary.BigEndian, &n); err != nil {
				return nil, fmt.Errorf("constant %d: %w", i, err)
			}
			s := make([]byte, n)
			if _, err := io.ReadFull(r, s); err != nil {
				return nil, fmt.Errorf("constant %d: %w", i, err)
			}
			out = append(out, string(s))
		case 3, 4, 9, 10, 11, 12, 17, 18: // Integer, Float, refs, NameAndType, Dynamic
			skip = 4
		case 5, 6: // Long, Double: two slots
			skip = 8
			i++
		case 7, 8, 16, 19, 20: // Class, String, MethodType, Module, Package
			skip = 2
		case 15: // MethodHandle
			skip = 3
		default:
			return nil, fmt.Errorf("constant %d: unknown tag %d", i, tag)
		}
		if _, err := r.Seek(int64(skip), io.SeekCurrent); err != nil {
			return nil, fmt.Errorf("constant %d: %w", i, err)
		}
	}
	return out, nil
}
