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
// redis.call/pcall lowercased, semicolons dropped, and local variables
// renamed in order of declaration.
func Normalize(src []byte) (string, error) {
	if len(src) > MaxScriptBytes {
		return "", errors.New("script: too long to recognise")
	}
	toks, err := tokenize(src)
	if err != nil {
		return "", err
	}
	// Lowercase command names: redis . call|pcall ( "NAME"
	for i := 0; i+4 < len(toks); i++ {
		if toks[i].kind == tName && toks[i].text == "redis" && toks[i+1].text == "." &&
			toks[i+2].kind == tName && (toks[i+2].text == "call" || toks[i+2].text == "pcall") &&
			toks[i+3].text == "(" && toks[i+4].kind == tString {
			toks[i+4].text = strings.ToLower(toks[i+4].text)
		}
	}
	renameLocals(toks)
	var b strings.Builder
	for _, t := range toks {
		if t.kind == tOp && t.text == ";" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if t.kind == tString {
			b.WriteString(strconv.Quote(t.text))
		} else {
			b.WriteString(t.text)
		}
	}
	return b.String(), nil
}

// renameLocals gives local variables, loop variables and function
// parameters the names _1, _2... in order of declaration, so that scripts
// differing only in their names compare equal. Field names (after . or :)
// are left alone.
func renameLocals(toks []token) {
	names := map[string]string{}
	declare := func(i int) {
		if toks[i].kind == tName && !isKeyword(toks[i].text) {
			if _, ok := names[toks[i].text]; !ok {
				names[toks[i].text] = "_" + strconv.Itoa(len(names)+1)
			}
		}
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.kind != tName {
			continue
		}
		switch t.text {
		case "local", "for":
			j := i + 1
			if j < len(toks) && toks[j].text == "function" {
				j++
			}
			for j < len(toks) && toks[j].kind == tName {
				declare(j)
				if j+1 < len(toks) && toks[j+1].text == "," {
					j += 2
					continue
				}
				break
			}
		case "function":
			j := i + 1
			for j < len(toks) && toks[j].text != "(" {
				j++
			}
			for j++; j < len(toks) && toks[j].text != ")"; j++ {
				declare(j)
			}
		}
	}
	for i := range toks {
		if toks[i].kind != tName {
			continue
		}
		if i > 0 && (toks[i-1].text == "." || toks[i-1].text == ":") && toks[i-1].kind == tOp {
			continue
		}
		if n, ok := names[toks[i].text]; ok {
			toks[i].text = n
		}
	}
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
// at src[i:], or -1.
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
	return -1
}

// skipLong returns the index after the long bracket closing "]", "=" *
// level, "]" that follows the opening at i.
func skipLong(src []byte, i, level int) (body string, next int, err error) {
	start := i + level + 2
	closing := "]" + strings.Repeat("=", level) + "]"
	k := strings.Index(string(src[start:]), closing)
	if k < 0 {
		return "", 0, ErrSyntax
	}
	body = string(src[start : start+k])
	// A newline right after the opening bracket is not part of the string.
	body = strings.TrimPrefix(strings.TrimPrefix(body, "\r"), "\n")
	return body, start + k + len(closing), nil
}

func tokenize(src []byte) ([]token, error) {
	var toks []token
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f':
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
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'':
			s, next, err := readQuoted(src, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{tString, s})
			i = next
		case c == '[' && longBracket(src, i) >= 0:
			body, next, err := skipLong(src, i, longBracket(src, i))
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{tString, body})
			i = next
		case isNameStart(c):
			j := i + 1
			for j < len(src) && (isNameStart(src[j]) || isDigit(src[j])) {
				j++
			}
			toks = append(toks, token{tName, string(src[i:j])})
			i = j
		case isDigit(c) || (c == '.' && i+1 < len(src) && isDigit(src[i+1])):
			j := i + 1
			for j < len(src) && (isDigit(src[j]) || isNameStart(src[j]) || src[j] == '.' ||
				((src[j] == '+' || src[j] == '-') && (src[j-1]|0x20) == 'e')) {
				j++
			}
			toks = append(toks, token{tNumber, strings.ToLower(string(src[i:j]))})
			i = j
		default:
			op := string(c)
			for _, long := range []string{"...", "..", "==", "~=", "<=", ">=", "::", "//", "<<", ">>"} {
				if strings.HasPrefix(string(src[i:min(i+3, len(src))]), long) {
					op = long
					break
				}
			}
			toks = append(toks, token{tOp, op})
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
		if j >= len(src) || src[j] == '\n' {
			return "", 0, ErrSyntax
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
		case '\n':
			b = append(b, '\n')
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
