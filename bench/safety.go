package main

import (
	"fmt"
	"os"
)

// runSafety is the fault-injection harness (see the faults issue). Until it
// lands, -mode safety says so instead of pretending to check anything.
func runSafety(args []string) int {
	fmt.Fprintln(os.Stderr, "bench: -mode safety is not implemented yet")
	return 2
}
