package script

import "fmt"

// Fact is what is known of a library's script without its text: its SHA1,
// where it comes from, and its classification (the classifier's verdict
// on the library's text, checked by the tests).
type Fact struct {
	Sha     string
	Library string
	Version string
	Script  string
	Spec    string // Class.Spec form
	Class   *Class
}

// facts lists the lock scripts of client libraries.
var facts = []Fact{}

// Facts returns the library facts with their classes parsed.
func Facts() []Fact {
	out := make([]Fact, len(facts))
	for i, f := range facts {
		c, err := ParseSpec(f.Spec)
		if err != nil {
			panic(fmt.Sprintf("script: fact %s %s: %v", f.Library, f.Script, err))
		}
		c.Source = fmt.Sprintf("%s %s %s", f.Library, f.Version, f.Script)
		f.Class = c
		out[i] = f
	}
	return out
}

// MustSpec parses a classification written in the source.
func MustSpec(s string) *Class {
	c, err := ParseSpec(s)
	if err != nil {
		panic(err)
	}
	c.Source = "built in"
	return c
}
