// Command readme-reference rewrites the configuration reference in README.md
// from the config package's defaults and descriptions (`make docs`).
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/kvgate/kvgate/config"
)

const begin, end = "<!-- config-reference:begin -->\n", "<!-- config-reference:end -->"

func main() {
	const path = "README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		fmt.Fprintln(os.Stderr, "README.md lacks the config-reference markers")
		os.Exit(1)
	}
	out := s[:i+len(begin)] + config.Reference() + s[j:]
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
