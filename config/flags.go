package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// EnvPrefix prefixes every environment variable.
const EnvPrefix = "KVROUTER_"

// EnvName is the environment variable of a flag: block-size →
// KVROUTER_BLOCK_SIZE.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Load parses args over the environment over the config file (--config
// or KVROUTER_CONFIG) over the defaults; -h prints the grouped flags to
// stderr and returns flag.ErrHelp.
func Load(args []string, getenv func(string) string) (Config, error) {
	return LoadWithOutput(args, getenv, os.Stderr)
}

// LoadWithOutput is Load printing help and flag errors to out.
func LoadWithOutput(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	// A first pass learns --config (the flags also name the file on the
	// command line); the file then sets the base the environment and the
	// flags are applied over.
	first := Default()
	helpOnly := false
	if fs, err := newFlagSet(&first, getenv); err == nil {
		// Errors are the second pass's to report; -h needs no file.
		helpOnly = errors.Is(fs.Parse(args), flag.ErrHelp)
	}
	cfg := Default()
	if first.ConfigFile != "" && !helpOnly {
		if err := LoadFile(&cfg, first.ConfigFile); err != nil {
			return cfg, err
		}
	}
	fs, err := newFlagSet(&cfg, getenv)
	if err != nil {
		return cfg, err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			if werr := WriteUsage(out); werr != nil {
				return cfg, werr
			}
			return cfg, err
		}
		return cfg, fmt.Errorf("parse flags: %w (kvrouter serve -h lists them)", err)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("invalid config: %w", err)
	}
	return cfg, nil
}

// newFlagSet prints nothing: a parse error is returned (and reported
// once, by the caller) and -h is answered by LoadWithOutput.
func newFlagSet(cfg *Config, getenv func(string) string) (*flag.FlagSet, error) {
	fs := flag.NewFlagSet("kvrouter serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs, Register(fs, cfg, getenv)
}

// Register defines one flag per tagged field of *cfg, with the value from
// the environment (if set) as its default. A field tagged env:"name"
// instead of flag:"name" is set from the environment only. A malformed
// environment value is an error, not silently ignored.
func Register(fs *flag.FlagSet, cfg *Config, getenv func(string) string) error {
	if getenv == nil {
		getenv = os.Getenv
	}
	v := reflect.ValueOf(cfg).Elem()
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := f.Tag.Get("flag")
		if name == "" {
			// env-only fields (secrets: a flag's value shows in ps).
			if envName := f.Tag.Get("env"); envName != "" {
				if env := getenv(EnvName(envName)); env != "" {
					if err := (&fieldValue{v: v.Field(i)}).Set(env); err != nil {
						return fmt.Errorf("environment %s: %w", EnvName(envName), err)
					}
				}
			}
			continue
		}
		fv := &fieldValue{v: v.Field(i)}
		if env := getenv(EnvName(name)); env != "" {
			if err := fv.Set(env); err != nil {
				return fmt.Errorf("environment %s: %w", EnvName(name), err)
			}
			fv.touched = false
		}
		usage := fmt.Sprintf("%s (env %s)", f.Tag.Get("help"), EnvName(name))
		if f.Type.Kind() == reflect.Bool {
			fs.Var(boolValue{fv}, name, usage)
		} else {
			fs.Var(fv, name, usage)
		}
	}
	return nil
}

// fieldValue adapts a struct field to flag.Value. A list flag given
// several times keeps every value (the first replaces the default or the
// environment's value).
type fieldValue struct {
	v       reflect.Value
	touched bool
}

var durationType = reflect.TypeOf(time.Duration(0))

func (f *fieldValue) String() string {
	// flag.PrintDefaults calls String on a zero boolValue (nil
	// *fieldValue) to learn whether a default is the zero value.
	if f == nil || !f.v.IsValid() {
		return ""
	}
	if f.v.Type() == durationType {
		return time.Duration(f.v.Int()).String()
	}
	if f.v.Kind() == reflect.Slice {
		return strings.Join(f.v.Interface().([]string), ",")
	}
	return fmt.Sprint(f.v.Interface())
}

func (f *fieldValue) Set(s string) error {
	if f.v.Type() == durationType {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		f.v.SetInt(int64(d))
		return nil
	}
	switch f.v.Kind() {
	case reflect.String:
		f.v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("boolean %q: %w", s, err)
		}
		f.v.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("integer %q: %w", s, err)
		}
		f.v.SetInt(n)
	case reflect.Uint64:
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("unsigned integer %q: %w", s, err)
		}
		f.v.SetUint(n)
	case reflect.Float64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("number %q: %w", s, err)
		}
		f.v.SetFloat(x)
	case reflect.Slice:
		var parts []string
		if f.touched {
			parts = append(parts, f.v.Interface().([]string)...)
		}
		f.touched = true
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		f.v.Set(reflect.ValueOf(parts))
	default:
		return fmt.Errorf("unsupported config field kind %s", f.v.Kind())
	}
	return nil
}

// boolValue lets `--flag` mean true and `--flag=false` work.
type boolValue struct{ *fieldValue }

func (boolValue) IsBoolFlag() bool { return true }
