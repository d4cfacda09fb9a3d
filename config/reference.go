package config

import (
	"reflect"
	"strings"
)

// Reference renders the configuration reference as a Markdown table: every
// key, its default, the environment variable that sets it and what it does.
// The README embeds this table between markers and a test keeps it current.
func Reference() string {
	var b strings.Builder
	b.WriteString("| key | default | environment | description |\n|---|---|---|---|\n")
	walkLeaves(reflect.ValueOf(Default()), "", func(l leaf) {
		def := formatValue(l.Value)
		envName := "—"
		if !strings.Contains(l.Path, "[]") {
			envName = "`" + EnvPrefix + strings.ToUpper(strings.ReplaceAll(l.Path, ".", "__")) + "`"
		}
		if def == "" || def == "[]" {
			def = "—"
		} else {
			def = "`" + def + "`"
		}
		b.WriteString("| `" + l.Path + "` | " + def + " | " + envName + " | " + l.Doc + " |\n")
	})
	return b.String()
}
