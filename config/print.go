package config

import (
	"reflect"
	"strings"
	"time"

	yamlv3 "go.yaml.in/yaml/v3"
)

// YAML renders c as a YAML document in the file's own shape: keys as the file
// spells them, durations as "1s", every key present, so the output of
// --print-config is itself a valid config file.
func (c Config) YAML() ([]byte, error) {
	var b strings.Builder
	enc := yamlv3.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(toNode(reflect.ValueOf(c))); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

func toNode(v reflect.Value) *yamlv3.Node {
	switch {
	case v.Type() == durationType:
		return &yamlv3.Node{Kind: yamlv3.ScalarNode, Value: v.Interface().(time.Duration).String()}
	case v.Kind() == reflect.Struct:
		n := &yamlv3.Node{Kind: yamlv3.MappingNode}
		for key, sf := range keyFields(v.Type(), "") {
			fv := v.FieldByIndex(sf.Index)
			val := toNode(fv)
			if sf.Tag.Get("secret") == "true" && !fv.IsZero() { // an unset secret stays unset
				val = redacted(val)
			}
			n.Content = append(n.Content, &yamlv3.Node{Kind: yamlv3.ScalarNode, Value: key}, val)
		}
		return n
	case v.Kind() == reflect.Slice:
		n := &yamlv3.Node{Kind: yamlv3.SequenceNode}
		if v.Type().Elem().Kind() != reflect.Struct {
			n.Style = yamlv3.FlowStyle
		}
		for i := range v.Len() {
			n.Content = append(n.Content, toNode(v.Index(i)))
		}
		return n
	default:
		n := &yamlv3.Node{}
		_ = n.Encode(v.Interface()) // scalars of basic kinds always encode
		return n
	}
}

// redacted replaces every scalar of a secret (API keys) so that
// --print-config never shows one; the structure (how many keys) stays.
func redacted(n *yamlv3.Node) *yamlv3.Node {
	if n.Kind == yamlv3.ScalarNode {
		return &yamlv3.Node{Kind: yamlv3.ScalarNode, Value: "<redacted>"}
	}
	for i, c := range n.Content {
		n.Content[i] = redacted(c)
	}
	return n
}
