package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"
)

// EnvPrefix starts every environment variable the gateway reads. Nesting is
// spelled "__": KVGATE_ROUTING__POLICY sets routing.policy.
const EnvPrefix = "KVGATE_"

// configFlag names the flag (and KVGATE_CONFIG the variable) that points at the YAML file.
const configFlag = "config"

// annotation marks the flags that stand for config keys, so that other flags
// on the same set (--demo, --print-config) never reach the config map.
const annotation = "kvgate-config-key"

// AddFlags registers --config and one flag per scalar config key, named by its
// key path (--listen, --routing.policy, --telemetry.interval, ...), with the
// defaults as flag defaults. List-valued keys (workers) come from the file.
func AddFlags(fs *pflag.FlagSet) {
	fs.String(configFlag, "", "YAML config file (also "+EnvPrefix+"CONFIG)")
	def := Default()
	walkLeaves(reflect.ValueOf(def), "", func(l leaf) {
		if strings.Contains(l.Path, "[]") {
			return
		}
		switch v := l.Value.Interface().(type) {
		case string:
			fs.String(l.Path, v, l.Doc)
		case bool:
			fs.Bool(l.Path, v, l.Doc)
		case int:
			fs.Int(l.Path, v, l.Doc)
		case int64:
			fs.Int64(l.Path, v, l.Doc)
		case float64:
			fs.Float64(l.Path, v, l.Doc)
		case []string:
			fs.StringSlice(l.Path, v, l.Doc+" (comma-separated)")
		default:
			if l.Value.Type() == durationType {
				fs.Duration(l.Path, l.Value.Interface().(time.Duration), l.Doc)
			} else {
				panic(fmt.Sprintf("config: no flag type for %s (%s)", l.Path, l.Value.Type()))
			}
		}
		_ = fs.SetAnnotation(l.Path, annotation, []string{"1"})
	})
}

// Load builds the effective config: defaults < YAML file < environment <
// flags. fs must have been set up with AddFlags and parsed; environ is the
// process environment (os.Environ() in production, explicit in tests).
// Every problem is reported at once, each with its key path.
func Load(fs *pflag.FlagSet, environ []string) (Config, error) {
	k := koanf.New(".")
	if err := k.Load(confmap.Provider(defaultsMap(), "."), nil); err != nil {
		return Config{}, fmt.Errorf("config defaults: %w", err)
	}

	path, _ := fs.GetString(configFlag)
	if path == "" {
		path = lookupEnv(environ, EnvPrefix+"CONFIG")
	}
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return Config{}, fmt.Errorf("config file: %w", err)
		}
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return Config{}, fmt.Errorf("config file %s: %w", path, err)
		}
	}

	envProvider := env.Provider(".", env.Opt{
		Prefix:        EnvPrefix,
		TransformFunc: envKey,
		EnvironFunc:   func() []string { return environ },
	})
	if err := k.Load(envProvider, nil); err != nil {
		return Config{}, fmt.Errorf("config environment: %w", err)
	}

	flags := posflag.ProviderWithFlag(fs, ".", k, func(f *pflag.Flag) (string, any) {
		if _, ok := f.Annotations[annotation]; !ok {
			return "", nil
		}
		return f.Name, posflag.FlagVal(fs, f)
	})
	if err := k.Load(flags, nil); err != nil {
		return Config{}, fmt.Errorf("config flags: %w", err)
	}

	if bad := unknownKeys(k.Raw(), reflect.TypeFor[Config](), ""); len(bad) > 0 {
		sort.Strings(bad)
		ve := &ValidationError{}
		for _, b := range bad {
			ve.Problems = append(ve.Problems, FieldError{Path: b, Reason: "unknown key"})
		}
		return Config{}, ve
	}

	var c Config
	if err := k.UnmarshalWithConf("", &c, koanf.UnmarshalConf{DecoderConfig: decoderConfig(&c)}); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c.applyWorkerDefaults()
	c.applyPartitionDefaults()
	nilEmptySlices(reflect.ValueOf(&c).Elem())
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// envKey maps KVGATE_ROUTING__POLICY to routing.policy; KVGATE_CONFIG names
// the file and is not a key. The worker list cannot be set from the
// environment (its items have no stable names there): such a variable
// becomes a key that validation reports, rather than silently replacing the
// file's list.
func envKey(name, value string) (string, any) {
	key := strings.ToLower(strings.TrimPrefix(name, EnvPrefix))
	if key == configFlag {
		return "", nil
	}
	key = strings.ReplaceAll(key, "__", ".")
	if key == "workers" || strings.HasPrefix(key, "workers.") || strings.HasPrefix(key, "admission.partitions") {
		return "env_" + strings.ReplaceAll(key, ".", "_"), value
	}
	return key, value
}

// decoderConfig decodes into c like koanf's default, except that a bare
// number is refused for a duration: "interval: 5" would mean 5 ns.
func decoderConfig(c *Config) *mapstructure.DecoderConfig {
	return &mapstructure.DecoderConfig{
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			rejectBareDurations,
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
			mapstructure.TextUnmarshallerHookFunc()),
		WeaklyTypedInput: true,
		Result:           c,
		TagName:          "koanf",
	}
}

func rejectBareDurations(from, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	switch from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		if d, ok := data.(time.Duration); ok {
			return d, nil // a default already typed as a duration
		}
		return nil, fmt.Errorf("duration %v needs a unit, such as \"%vs\" or \"%vms\"", data, data, data)
	}
	return data, nil
}

func lookupEnv(environ []string, name string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

func (c *Config) applyPartitionDefaults() {
	for i := range c.Admission.Partitions {
		if c.Admission.Partitions[i].Weight == 0 {
			c.Admission.Partitions[i].Weight = DefaultPartitionConfig().Weight
		}
	}
}

func (c *Config) applyWorkerDefaults() {
	for i := range c.Workers {
		c.Workers[i] = c.Workers[i].WithDefaults()
	}
}

// WithDefaults fills the keys w leaves unset with DefaultWorker's values,
// as the file's entries get them; the admin API applies it to its entries.
func (w Worker) WithDefaults() Worker {
	def := DefaultWorker()
	if w.Engine == "" {
		w.Engine = def.Engine
	}
	if w.DPRanks == 0 {
		w.DPRanks = def.DPRanks
	}
	return w
}

// defaultsMap flattens Default() into key paths for koanf.
func defaultsMap() map[string]any {
	m := map[string]any{}
	walkLeaves(reflect.ValueOf(Default()), "", func(l leaf) {
		if !strings.Contains(l.Path, "[]") {
			m[l.Path] = l.Value.Interface()
		}
	})
	return m
}

// IsValidation reports whether err lists configuration problems by key path.
func IsValidation(err error) bool {
	var ve *ValidationError
	return errors.As(err, &ve)
}

// nilEmptySlices turns every empty list in v into nil, so that a list
// written as [] and one left out load to the same Config.
func nilEmptySlices(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			nilEmptySlices(v.Field(i))
		}
	case reflect.Slice:
		if v.Len() == 0 {
			v.Set(reflect.Zero(v.Type()))
			return
		}
		for i := range v.Len() {
			nilEmptySlices(v.Index(i))
		}
	}
}
