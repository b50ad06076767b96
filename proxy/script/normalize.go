// Package script recognises the Lua lock scripts that client libraries send,
// whatever their formatting, and says what each one means: its role
// (acquire, release, extend...), where its token and TTL are, and how to read
// one backend's reply to it.
//
// It promises: Normalize maps two scripts to the same canonical text when
// they differ only in whitespace, comments, line endings, quote style or
// escapes of string literals, the case of Redis command names inside
// redis.call/pcall, optional semicolons, or the names of local variables;
// and it never panics, whatever the input.
package script

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
)

// ErrSyntax is returned for a script whose tokens cannot be read
// (an unterminated string or long comment).
var ErrSyntax = errors.New("script: unreadable Lua")

// MaxScriptBytes bounds what Normalize reads.
const MaxScriptBytes = 256 << 10

type tokKind uint8

const (
	tName tokKind = iota + 1
	tString
	tNumber
	tOp
)

type token struct {
	kind tokKind
	text string // for strings: the decoded value
}

// Normalize returns the canonical text of a Lua script: its tokens, one
// space apart, with comments dropped, strings re-quoted, command names in
// redis.call/pcall lowercased, semicolons dropped (but before "("), and
// local variables renamed in order of declaration.
func Normalize(src []byte) (string, error) {
	if len(src) > MaxScriptBytes {
		return "", errors.New("script: too long to recognise")
	}
	toks, err := tokenize(src)
	if err != nil {
		return "", err
	}
	isOp := func(t token, op string) bool { return t.kind == tOp && t.text == op }
	// Semicolons are optional separators, except before "(" where one
	// separates "f; (g)()" from the call "f(g)()".
	kept := toks[:0]
	for i, t := range toks {
		if isOp(t, ";") && !(i+1 < len(toks) && isOp(toks[i+1], "(")) {
			continue
		}
		kept = append(kept, t)
	}
	toks = kept
	// Lowercase command names: redis . call|pcall ( "NAME"
	for i := 0; i+4 < len(toks); i++ {
		if toks[i].kind == tName && toks[i].text == "redis" && isOp(toks[i+1], ".") &&
			toks[i+2].kind == tName && (toks[i+2].text == "call" || toks[i+2].text == "pcall") &&
			isOp(toks[i+3], "(") && toks[i+4].kind == tString {
			toks[i+4].text = strings.ToLower(toks[i+4].text)
		}
	}
	renameLocals(toks)
	var b strings.Builder
	for _, t := range toks {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if t.kind == tString {
			luaQuote(&b, t.text)
		} else {
			b.WriteString(t.text)
		}
	}
	return b.String(), nil
}

// luaQuote writes s as a Lua 5.1 string literal that reads back as s:
// printable ASCII as is, quote and backslash escaped, every other byte as a
// three-digit decimal escape. So the canonical text is itself a script that
// normalizes to itself.
func luaQuote(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			b.WriteByte('\\')
			b.WriteByte('0' + c/100)
			b.WriteByte('0' + c/10%10)
			b.WriteByte('0' + c%10)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// renameLocals gives local variables, loop variables and function
// parameters canonical names in order of declaration, so that scripts
// differing only in those names compare equal. Field names (after . or :)
// are left alone, and the canonical names are chosen so that they cannot
// be any global the script reads ("_1" unless the script reads a global
// spelled with underscores and digits; then more underscores). It reports
// how many tokens its declaration scans visited, so tests can check that
// its work stays linear.
func renameLocals(toks []token) (scanned int) {
	var order []string
	declared := map[string]bool{}
	declare := func(i int) {
		if toks[i].kind == tName && !isKeyword(toks[i].text) && !declared[toks[i].text] {
			declared[toks[i].text] = true
			order = append(order, toks[i].text)
		}
	}
	for i := 0; i < len(toks); i++ {
		if toks[i].kind != tName {
			continue
		}
		switch toks[i].text {
		case "local", "for":
			j := i + 1
			if j < len(toks) && toks[j].text == "function" {
				j++
			}
			for j < len(toks) && toks[j].kind == tName && !isKeyword(toks[j].text) {
				scanned++
				declare(j)
				if j+1 < len(toks) && toks[j+1].kind == tOp && toks[j+1].text == "," {
					j += 2
					continue
				}
				break
			}
		case "function":
			// function [Name {. Name} [: Name]] ( params )
			j := i + 1
			for j < len(toks) && ((toks[j].kind == tName && !isKeyword(toks[j].text)) ||
				(toks[j].kind == tOp && (toks[j].text == "." || toks[j].text == ":"))) {
				scanned++
				j++
			}
			if j >= len(toks) || toks[j].text != "(" {
				continue
			}
			for j++; j < len(toks); j++ {
				scanned++
				switch {
				case toks[j].kind == tName && !isKeyword(toks[j].text):
					declare(j)
				case toks[j].kind == tOp && (toks[j].text == "," || toks[j].text == "..."):
				default:
					j = len(toks) // ")" or a syntax error: the header is over
				}
			}
		}
	}
	if len(order) == 0 {
		return scanned
	}
	isField := func(i int) bool {
		return i > 0 && toks[i-1].kind == tOp && (toks[i-1].text == "." || toks[i-1].text == ":")
	}
	// Globals spelled like canonical names push the prefix further.
	prefix := "_"
	for i, t := range toks {
		if t.kind != tName || declared[t.text] || isField(i) {
			continue
		}
		u := len(t.text) - len(strings.TrimLeft(t.text, "_"))
		rest := t.text[u:]
		if u > 0 && rest != "" && strings.Trim(rest, "0123456789") == "" && u >= len(prefix) {
			prefix = strings.Repeat("_", u+1)
		}
	}
	names := make(map[string]string, len(order))
	for k, n := range order {
		names[n] = prefix + strconv.Itoa(k+1)
	}
	for i := range toks {
		if toks[i].kind == tName && !isField(i) {
			if n, ok := names[toks[i].text]; ok {
				toks[i].text = n
			}
		}
	}
	return scanned
}

var keywords = map[string]bool{
	"and": true, "break": true, "do": true, "else": true, "elseif": true, "end": true,
	"false": true, "for": true, "function": true, "if": true, "in": true, "local": true,
	"nil": true, "not": true, "or": true, "repeat": true, "return": true, "then": true,
	"true": true, "until": true, "while": true, "goto": true,
}

func isKeyword(s string) bool { return keywords[s] }

func isNameStart(c byte) bool { return c == '_' || (c|0x20) >= 'a' && (c|0x20) <= 'z' }
func isDigit(c byte) bool     { return c >= '0' && c <= '9' }

// longBracket reports the level of a long bracket "[", "=" * level, "["
// at src[i:], -1 when src[i] is a plain "[", and -2 for "[=" not followed
// by "[" (Lua: "invalid long string delimiter").
func longBracket(src []byte, i int) int {
	if i >= len(src) || src[i] != '[' {
		return -1
	}
	j := i + 1
	for j < len(src) && src[j] == '=' {
		j++
	}
	if j < len(src) && src[j] == '[' {
		return j - i - 1
	}
	if j > i+1 {
		return -2
	}
	return -1
}

// skipLong reads the long string or comment whose opening bracket of the
// given level is at i, and returns its body and the index after it. As in
// Lua 5.1, a newline right after the opening bracket is dropped, each
// newline sequence (\n, \r, \r\n, \n\r) reads as "\n", and "[[" inside a
// level-0 string is an error.
func skipLong(src []byte, i, level int) (body string, next int, err error) {
	start := i + level + 2
	closing := make([]byte, 0, level+2)
	closing = append(closing, ']')
	for k := 0; k < level; k++ {
		closing = append(closing, '=')
	}
	closing = append(closing, ']')
	k := bytes.Index(src[start:], closing)
	if k < 0 {
		return "", 0, ErrSyntax
	}
	raw := src[start : start+k]
	if level == 0 && bytes.Contains(raw, []byte("[[")) {
		return "", 0, ErrSyntax // "nesting of [[...]] is deprecated"
	}
	isNL := func(c byte) bool { return c == '\n' || c == '\r' }
	j := 0
	skipNewline := func() {
		c := raw[j]
		j++
		if j < len(raw) && isNL(raw[j]) && raw[j] != c {
			j++
		}
	}
	if j < len(raw) && isNL(raw[j]) {
		skipNewline()
	}
	b := make([]byte, 0, len(raw))
	for j < len(raw) {
		if isNL(raw[j]) {
			b = append(b, '\n')
			skipNewline()
			continue
		}
		b = append(b, raw[j])
		j++
	}
	return string(b), start + k + len(closing), nil
}

func isLuaSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'
}

func isAlnum(c byte) bool { return isNameStart(c) || isDigit(c) }

// tokenize splits src into Lua 5.1 tokens exactly as Redis's Lua lexer
// (llex.c) does, so that two sources with the same tokens are the same
// program. Bytes Lua has no token for become one-byte tokens (Lua's parser
// rejects them; so does Redis).
func tokenize(src []byte) ([]token, error) {
	var toks []token
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case isLuaSpace(c):
			i++
		case c == '-' && i+1 < len(src) && src[i+1] == '-':
			i += 2
			if lvl := longBracket(src, i); lvl >= 0 {
				_, next, err := skipLong(src, i, lvl)
				if err != nil {
					return nil, err
				}
				i = next
				continue
			}
			// A short comment ends at the first newline, \n or \r.
			for i < len(src) && src[i] != '\n' && src[i] != '\r' {
				i++
			}
		case c == '[':
			lvl := longBracket(src, i)
			switch {
			case lvl >= 0:
				body, next, err := skipLong(src, i, lvl)
				if err != nil {
					return nil, err
				}
				toks = append(toks, token{tString, body})
				i = next
			case lvl == -2:
				return nil, ErrSyntax
			default:
				toks = append(toks, token{tOp, "["})
				i++
			}
		case c == '"' || c == '\'':
			s, next, err := readQuoted(src, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{tString, s})
			i = next
		case isNameStart(c):
			j := i + 1
			for j < len(src) && isAlnum(src[j]) {
				j++
			}
			toks = append(toks, token{tName, string(src[i:j])})
			i = j
		case isDigit(c) || (c == '.' && i+1 < len(src) && isDigit(src[i+1])):
			// Lua 5.1 read_numeral: digits and dots, an optional exponent
			// sign after E, then any alphanumerics.
			j := i
			for j < len(src) && (isDigit(src[j]) || src[j] == '.') {
				j++
			}
			if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
				j++
				if j < len(src) && (src[j] == '+' || src[j] == '-') {
					j++
				}
			}
			for j < len(src) && isAlnum(src[j]) {
				j++
			}
			toks = append(toks, token{tNumber, strings.ToLower(string(src[i:j]))})
			i = j
		default:
			op := src[i : i+1]
			for _, long := range []string{"...", "..", "==", "~=", "<=", ">="} {
				if bytes.HasPrefix(src[i:], []byte(long)) {
					op = src[i : i+len(long)]
					break
				}
			}
			toks = append(toks, token{tOp, string(op)})
			i += len(op)
		}
	}
	return toks, nil
}

// readQuoted decodes a short string literal starting at the quote src[i].
func readQuoted(src []byte, i int) (string, int, error) {
	q := src[i]
	var b []byte
	j := i + 1
	for {
		if j >= len(src) || src[j] == '\n' || src[j] == '\r' {
			return "", 0, ErrSyntax // unfinished string
		}
		c := src[j]
		if c == q {
			return string(b), j + 1, nil
		}
		if c != '\\' {
			b = append(b, c)
			j++
			continue
		}
		j++
		if j >= len(src) {
			return "", 0, ErrSyntax
		}
		e := src[j]
		switch e {
		case 'n':
			b = append(b, '\n')
		case 't':
			b = append(b, '\t')
		case 'r':
			b = append(b, '\r')
		case 'a':
			b = append(b, '\a')
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'v':
			b = append(b, '\v')
		case '\n', '\r':
			// An escaped newline sequence (\n, \r, \r\n, \n\r) is one "\n".
			b = append(b, '\n')
			if j+1 < len(src) && (src[j+1] == '\n' || src[j+1] == '\r') && src[j+1] != e {
				j++
			}
		default:
			if isDigit(e) {
				v, k := 0, 0
				for k < 3 && j < len(src) && isDigit(src[j]) {
					v = v*10 + int(src[j]-'0')
					j++
					k++
				}
				if v > 255 {
					return "", 0, ErrSyntax
				}
				b = append(b, byte(v))
				continue
			}
			b = append(b, e) // \\ \" \' and anything else stand for themselves
		}
		j++
	}
}
