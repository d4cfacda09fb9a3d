package config

import (
	"fmt"
	"iter"
	"reflect"
	"strings"
	"time"
)

var durationType = reflect.TypeFor[time.Duration]()

// leaf is one scalar key of the config: its dotted path, its description and
// the field's value in the struct being walked.
type leaf struct {
	Path  string
	Doc   string
	Value reflect.Value
}

// keyFields yields the config keys of struct type t, in declaration order:
// each field with a koanf tag, with its key path under prefix ("" for the
// bare key). Every walk over the config's shape goes through it.
func keyFields(t reflect.Type, prefix string) iter.Seq2[string, reflect.StructField] {
	return func(yield func(string, reflect.StructField) bool) {
		for i := range t.NumField() {
			sf := t.Field(i)
			key := sf.Tag.Get("koanf")
			if key == "" {
				continue
			}
			if prefix != "" {
				key = prefix + "." + key
			}
			if !yield(key, sf) {
				return
			}
		}
	}
}

// walkLeaves calls fn for every scalar leaf of v (a struct value) in
// declaration order. A slice of structs is walked once over its element type
// with the path segment "name[]", so the reference documents list items too;
// such leaves carry the element type's zero value or, for workers, the per-item
// defaults.
func walkLeaves(v reflect.Value, prefix string, fn func(leaf)) {
	for path, sf := range keyFields(v.Type(), prefix) {
		fv := v.FieldByIndex(sf.Index)
		switch {
		case sf.Type.Kind() == reflect.Struct && sf.Type != durationType:
			walkLeaves(fv, path, fn)
		case sf.Type.Kind() == reflect.Slice && sf.Type.Elem().Kind() == reflect.Struct:
			elem := reflect.New(sf.Type.Elem()).Elem()
			switch sf.Type.Elem() {
			case reflect.TypeFor[Worker]():
				elem.Set(reflect.ValueOf(DefaultWorker()))
			case reflect.TypeFor[PartitionConfig]():
				elem.Set(reflect.ValueOf(DefaultPartitionConfig()))
			}
			walkLeaves(elem, path+"[]", fn)
		default:
			fn(leaf{Path: path, Doc: sf.Tag.Get("doc"), Value: fv})
		}
	}
}

// formatValue renders a leaf's value the way a YAML file would spell it.
func formatValue(v reflect.Value) string {
	if v.Type() == durationType {
		return v.Interface().(time.Duration).String()
	}
	if v.Kind() == reflect.Slice {
		parts := make([]string, v.Len())
		for i := range v.Len() {
			parts[i] = fmt.Sprint(v.Index(i).Interface())
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprint(v.Interface())
}

// unknownKeys lists the keys of raw (a parsed config map) that the type t does
// not define, as full key paths such as "routing.polcy" or "workers[1].urll".
func unknownKeys(raw map[string]any, t reflect.Type, prefix string) []string {
	known := map[string]reflect.StructField{}
	for key, sf := range keyFields(t, "") {
		known[key] = sf
	}
	var bad []string
	for key, val := range raw {
		path := key
		if prefix != "" {
			path = prefix + "." + key
		}
		sf, ok := known[key]
		if !ok {
			bad = append(bad, path)
			continue
		}
		switch {
		case sf.Type.Kind() == reflect.Struct && sf.Type != durationType:
			if m, ok := val.(map[string]any); ok {
				bad = append(bad, unknownKeys(m, sf.Type, path)...)
			}
		case sf.Type.Kind() == reflect.Slice && sf.Type.Elem().Kind() == reflect.Struct:
			items, _ := val.([]any)
			for i, item := range items {
				if m, ok := item.(map[string]any); ok {
					bad = append(bad, unknownKeys(m, sf.Type.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
				}
			}
		}
	}
	return bad
}
