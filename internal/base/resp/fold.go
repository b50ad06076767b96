package resp

// Command names, options and SHA1s are ASCII and case-insensitive: these
// are the one case-folding of the proxy.

// AppendLower appends src to dst with ASCII upper case folded to lower.
func AppendLower(dst, src []byte) []byte {
	for _, ch := range src {
		if ch >= 'A' && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		dst = append(dst, ch)
	}
	return dst
}

// EqualFold reports whether a equals the ASCII word s, ignoring case.
func EqualFold(a []byte, s string) bool {
	if len(a) != len(s) {
		return false
	}
	for i := range a {
		if lower(a[i]) != lower(s[i]) {
			return false
		}
	}
	return true
}

func lower(ch byte) byte {
	if ch >= 'A' && ch <= 'Z' {
		return ch + 'a' - 'A'
	}
	return ch
}
