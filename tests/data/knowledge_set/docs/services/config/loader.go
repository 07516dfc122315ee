// Package config loads service configuration from a YAML file, then environment
// variables, then command-line flags; later sources override earlier ones.
package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is what every Heron service reads at startup.
type Config struct {
	ListenAddr      string        `yaml:"listen_addr"`
	DatabaseURL     string        `yaml:"database_url"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	MaxConns        int           `yaml:"max_conns"`
	LogLevel        string        `yaml:"log_level"`
	FeatureFlags    []string      `yaml:"feature_flags"`
}

// Defaults are used for any field that no source sets.
func Defaults() Config {
	return Config{
		ListenAddr:      ":8080",
		ShutdownTimeout: 25 * time.Second,
		MaxConns:        20,
		LogLevel:        "info",
	}
}

// ErrMissingDatabase is returned when no source sets the database URL.
var ErrMissingDatabase = errors.New("config: database_url is required")

// Load reads the YAML file at path (if it exists), applies HERON_* environment
// variables and validates the result.
func Load(path string) (Config, error) {
	cfg := Defaults()
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := yaml.Unmarshal(data, &cfg); err != nil {
			return cfg, fmt.Errorf("config: %s: %w", path, err)
		}
	case errors.Is(err, os.ErrNotExist):
		// A missing file is fine: containers configure through the environment.
	default:
		return cfg, err
	}
	if err := applyEnv(&cfg, os.LookupEnv); err != nil {
		return cfg, err
	}
	return cfg, validate(cfg)
}

// applyEnv overrides fields from HERON_LISTEN_ADDR, HERON_DATABASE_URL,
// HERON_SHUTDOWN_TIMEOUT, HERON_MAX_CONNS, HERON_LOG_LEVEL and HERON_FEATURE_FLAGS
// (comma separated).
func applyEnv(cfg *Config, lookup func(string) (string, bool)) error {
	if v, ok := lookup("HERON_LISTEN_ADDR"); ok {
		cfg.ListenAddr = v
	}
	if v, ok := lookup("HERON_DATABASE_URL"); ok {
		cfg.DatabaseURL = v
	}
	if v, ok := lookup("HERON_SHUTDOWN_TIMEOUT"); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("config: HERON_SHUTDOWN_TIMEOUT: %w", err)
		}
		cfg.ShutdownTimeout = d
	}
	if v, ok := lookup("HERON_MAX_CONNS"); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("config: HERON_MAX_CONNS: %w", err)
		}
		cfg.MaxConns = n
	}
	if v, ok := lookup("HERON_LOG_LEVEL"); ok {
		cfg.LogLevel = strings.ToLower(v)
	}
	if v, ok := lookup("HERON_FEATURE_FLAGS"); ok && v != "" {
		cfg.FeatureFlags = strings.Split(v, ",")
	}
	return nil
}

func validate(cfg Config) error {
	if cfg.DatabaseURL == "" {
		return ErrMissingDatabase
	}
	if cfg.MaxConns < 1 || cfg.MaxConns > 500 {
		return fmt.Errorf("config: max_conns must be between 1 and 500, got %d", cfg.MaxConns)
	}
	// Kubernetes sends SIGKILL 30 seconds after SIGTERM; stopping must finish first.
	if cfg.ShutdownTimeout >= 30*time.Second {
		return fmt.Errorf("config: shutdown_timeout must stay under the 30s grace period")
	}
	switch cfg.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("config: unknown log_level %q", cfg.LogLevel)
	}
	return nil
}

// Redacted returns a copy safe to log: the password in the database URL is masked.
func (c Config) Redacted() Config {
	out := c
	if at := strings.LastIndex(out.DatabaseURL, "@"); at > 0 {
		if colon := strings.LastIndex(out.DatabaseURL[:at], ":"); colon > strings.Index(out.DatabaseURL, "//") {
			out.DatabaseURL = out.DatabaseURL[:colon+1] + "*****" + out.DatabaseURL[at:]
		}
	}
	return out
}
