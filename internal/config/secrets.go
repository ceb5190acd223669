package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Secrets are the values read from the environment variables and files a
// configuration names. They are never logged.
type Secrets struct {
	// TenantKeys maps a tenant's API key to its ID.
	TenantKeys map[string]string
	// ProviderKeys maps a provider ID to its key ("" when none is set).
	ProviderKeys map[string]string
	// ProviderHeaders and ProviderQuery map a provider ID to the values of
	// its extra headers and query parameters (headers:, query:), by name.
	ProviderHeaders, ProviderQuery map[string]map[string]string
	// ValueSecrets are the header and query values read from the
	// environment or files: secrets to scrub, like the keys.
	ValueSecrets []string
	// GatewaySecret is the fingerprint HMAC secret ("" means: use the
	// store's generated one).
	GatewaySecret string
	// AdminKey is the admin key ("" when none is configured).
	AdminKey string
	// BudgetWebhookSecret signs the budget alerts ("" when no webhook is
	// configured).
	BudgetWebhookSecret string
}

// MaxSecretFileBytes bounds a file holding one secret.
const MaxSecretFileBytes = 64 << 10

// secretSource is where one secret comes from: the environment variable
// or the file a configuration key names, with that key's path.
type secretSource struct {
	path string // e.g. "tenants[0].api_key_file"
	env  string // the variable's name, when from the environment
	file string // the file's name, when from a file
}

// secretSourceErrors holds a configuration to its secrets' sources:
// exactly one of a tenant's api_key_env and api_key_file, at most one of
// each other pair, and no empty name in a list.
func (c *Config) secretSourceErrors() Errors {
	var errs Errors
	pair := func(prefix, env, file string, required bool) {
		switch {
		case env != "" && file != "":
			errs = append(errs, c.ErrorAt(prefix+"_file", "set %s_env or %s_file, not both", lastName(prefix), lastName(prefix)))
		case required && env == "" && file == "":
			errs = append(errs, c.ErrorAt(prefix+"_env", "missing %s_env or %s_file: one of them names the key", lastName(prefix), lastName(prefix)))
		}
	}
	for i, t := range c.Tenants {
		// The admin tenant may have no key of its own: the admin key is one.
		pair(fmt.Sprintf("tenants[%d].api_key", i), t.APIKeyEnv, t.APIKeyFile, t.ID != c.AdminTenant)
		for j, v := range t.APIKeyEnvs {
			if v == "" {
				errs = append(errs, c.ErrorAt(fmt.Sprintf("tenants[%d].api_key_envs[%d]", i, j), "empty variable name"))
			}
		}
		for j, v := range t.APIKeyFiles {
			if v == "" {
				errs = append(errs, c.ErrorAt(fmt.Sprintf("tenants[%d].api_key_files[%d]", i, j), "empty file name"))
			}
		}
	}
	for i, p := range c.Providers {
		pair(fmt.Sprintf("providers[%d].api_key", i), p.APIKeyEnv, p.APIKeyFile, false)
	}
	pair("admin_key", c.AdminKeyEnv, c.AdminKeyFile, false)
	pair("secret", c.SecretEnv, c.SecretFile, false)
	return errs
}

// lastName is a key path's last name: "api_key" of "tenants[0].api_key".
func lastName(path string) string { return path[strings.LastIndex(path, ".")+1:] }

// tenantSources lists where tenant t's keys come from, first its own.
func tenantSources(i int, t Tenant) []secretSource {
	var out []secretSource
	if t.APIKeyEnv != "" {
		out = append(out, secretSource{path: fmt.Sprintf("tenants[%d].api_key_env", i), env: t.APIKeyEnv})
	}
	if t.APIKeyFile != "" {
		out = append(out, secretSource{path: fmt.Sprintf("tenants[%d].api_key_file", i), file: t.APIKeyFile})
	}
	for j, env := range t.APIKeyEnvs {
		out = append(out, secretSource{path: fmt.Sprintf("tenants[%d].api_key_envs[%d]", i, j), env: env})
	}
	for j, file := range t.APIKeyFiles {
		out = append(out, secretSource{path: fmt.Sprintf("tenants[%d].api_key_files[%d]", i, j), file: file})
	}
	return out
}

// ResolveSecrets reads every environment variable (through lookup) and
// every file the configuration names. Every missing, empty or unreadable
// one is reported at once, with its position; no error carries a secret.
// It is called at start and on every reload, so a file's new content
// takes effect on the next reload.
func (c *Config) ResolveSecrets(lookup func(string) (string, bool)) (*Secrets, error) {
	s := &Secrets{TenantKeys: map[string]string{}, ProviderKeys: map[string]string{},
		ProviderHeaders: map[string]map[string]string{}, ProviderQuery: map[string]map[string]string{}}
	var errs Errors
	get := func(src secretSource) string {
		v, err := c.readSecret(src, lookup)
		if err != nil {
			errs = append(errs, c.ErrorAt(src.path, "%v", err))
		}
		return v
	}
	for i, t := range c.Tenants {
		for _, src := range tenantSources(i, t) {
			key := get(src)
			if other, dup := s.TenantKeys[key]; dup && key != "" {
				errs = append(errs, c.ErrorAt(src.path, "tenant %q has the same API key as tenant %q", t.ID, other))
			}
			if key != "" {
				s.TenantKeys[key] = t.ID
			}
		}
	}
	errs = append(errs, c.providerSecrets(s, lookup)...)
	switch {
	case c.SecretEnv != "":
		s.GatewaySecret, _ = lookup(c.SecretEnv) // unset: generated and kept in the store
	case c.SecretFile != "":
		s.GatewaySecret = get(secretSource{path: "secret_file", file: c.SecretFile})
	}
	switch {
	case c.AdminKeyEnv != "":
		s.AdminKey = get(secretSource{path: "admin_key_env", env: c.AdminKeyEnv})
	case c.AdminKeyFile != "":
		s.AdminKey = get(secretSource{path: "admin_key_file", file: c.AdminKeyFile})
	}
	if wh := c.Alerts.BudgetWebhook; wh.URL != "" && wh.SecretEnv != "" {
		s.BudgetWebhookSecret = get(secretSource{path: "alerts.budget_webhook.secret_env", env: wh.SecretEnv})
		if s.BudgetWebhookSecret != "" {
			s.ValueSecrets = append(s.ValueSecrets, s.BudgetWebhookSecret)
		}
	}
	if tenant, dup := s.TenantKeys[s.AdminKey]; dup && s.AdminKey != "" {
		path := "admin_key_env"
		if c.AdminKeyFile != "" {
			path = "admin_key_file"
		}
		errs = append(errs, c.ErrorAt(path, "the admin key is tenant %q's API key: it must be a key of its own", tenant))
	}
	if c.AdminTenant != "" && s.AdminKey != "" {
		s.TenantKeys[s.AdminKey] = c.AdminTenant // the admin key also calls /v1/* as this tenant
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return s, nil
}

// readSecret reads one secret from its variable or its file.
func (c *Config) readSecret(src secretSource, lookup func(string) (string, bool)) (string, error) {
	if src.env != "" {
		v, ok := lookup(src.env)
		if !ok || v == "" {
			return "", fmt.Errorf("environment variable %s is not set", src.env)
		}
		return v, nil
	}
	path := src.file
	if !filepath.IsAbs(path) && c.file != "" {
		path = filepath.Join(filepath.Dir(c.file), path)
	}
	return readSecretFile(path)
}

// MaxCredentialsFileBytes bounds a service-account key file.
const MaxCredentialsFileBytes = 64 << 10

// readCredentialsFile reads a credentials file (a service account's JSON
// key), whole. Errors name the file, never its content.
func readCredentialsFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return "", fmt.Errorf("credentials file %s: %v", path, pe.Err)
		}
		return "", fmt.Errorf("credentials file %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxCredentialsFileBytes+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("credentials file %s: %w", path, err)
	case len(data) > MaxCredentialsFileBytes:
		return "", fmt.Errorf("credentials file %s is larger than %d bytes: is it the right file?", path, MaxCredentialsFileBytes)
	case len(strings.TrimSpace(string(data))) == 0:
		return "", fmt.Errorf("credentials file %s is empty", path)
	}
	return string(data), nil
}

// readSecretFile reads a file holding one secret, without its
// surrounding whitespace (the newline an editor or `echo` adds).
func readSecretFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return "", fmt.Errorf("secret file %s: %v", path, pe.Err)
		}
		return "", fmt.Errorf("secret file %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSecretFileBytes+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("secret file %s: %w", path, err)
	case len(data) > MaxSecretFileBytes:
		return "", fmt.Errorf("secret file %s is larger than %d bytes: is it the right file?", path, MaxSecretFileBytes)
	}
	v := strings.TrimSpace(string(data))
	switch {
	case v == "":
		return "", fmt.Errorf("secret file %s is empty", path)
	case strings.ContainsAny(v, "\r\n"):
		return "", fmt.Errorf("secret file %s holds more than one line: one secret a file", path)
	}
	return v, nil
}

// ResolveProviderSecrets reads the providers' secrets only — their keys,
// and the headers and query values from the environment or files — as
// ResolveSecrets does: what `oncegate check --connect` needs to reach
// the providers.
func (c *Config) ResolveProviderSecrets(lookup func(string) (string, bool)) (*Secrets, error) {
	s := &Secrets{ProviderKeys: map[string]string{}, ProviderHeaders: map[string]map[string]string{}, ProviderQuery: map[string]map[string]string{}}
	if errs := c.providerSecrets(s, lookup); len(errs) > 0 {
		return nil, errs
	}
	return s, nil
}

// providerSecrets reads every provider's secrets into s.
func (c *Config) providerSecrets(s *Secrets, lookup func(string) (string, bool)) Errors {
	var errs Errors
	get := func(src secretSource) string {
		v, err := c.readSecret(src, lookup)
		if err != nil {
			errs = append(errs, c.ErrorAt(src.path, "%v", err))
		}
		return v
	}
	for i, p := range c.Providers {
		switch {
		case p.APIKeyEnv != "":
			s.ProviderKeys[p.ID] = get(secretSource{path: fmt.Sprintf("providers[%d].api_key_env", i), env: p.APIKeyEnv})
		case p.APIKeyFile != "":
			s.ProviderKeys[p.ID] = get(secretSource{path: fmt.Sprintf("providers[%d].api_key_file", i), file: p.APIKeyFile})
		case p.CredentialsFileEnv != "":
			// vertex: the variable names a service-account key file, whose
			// JSON is the provider's key.
			path := fmt.Sprintf("providers[%d].credentials_file_env", i)
			if file := get(secretSource{path: path, env: p.CredentialsFileEnv}); file != "" {
				v, err := readCredentialsFile(file)
				if err != nil {
					errs = append(errs, c.ErrorAt(path, "%v", err))
				}
				s.ProviderKeys[p.ID] = v
			}
		}
		values := func(section string, vs Values) map[string]string {
			out := make(map[string]string, len(vs))
			for _, v := range vs {
				src := secretSource{path: fmt.Sprintf("providers[%d].%s.%s", i, section, v.Name), env: v.Env, file: v.File}
				if !v.Secret {
					out[v.Name] = v.Literal
					continue
				}
				val, err := c.readSecret(src, lookup)
				if err != nil {
					errs = append(errs, &Error{File: c.file, Pos: v.Pos, Path: src.path, Msg: err.Error()})
				}
				out[v.Name] = val
				s.ValueSecrets = append(s.ValueSecrets, val)
			}
			return out
		}
		if len(p.Headers) > 0 {
			s.ProviderHeaders[p.ID] = values("headers", p.Headers)
		}
		if len(p.Query) > 0 {
			s.ProviderQuery[p.ID] = values("query", p.Query)
		}
	}
	return errs
}
