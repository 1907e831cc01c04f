// Package jsonschema validates JSON documents against the subset of JSON
// Schema (draft 2020-12) that docs/cli-json.schema.json uses: $ref to
// "#/$defs/NAME", oneOf, type (one or a list), const, enum, pattern,
// minimum, maximum, required, properties, additionalProperties (false or a
// schema) and items. A keyword outside that subset is an error, never
// ignored, so the schema cannot say more than the tests check. Tests only.
package jsonschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
)

// Schema is a loaded schema.
type Schema struct {
	root map[string]any
	res  map[string]*regexp.Regexp
}

// Load reads a schema file.
func Load(path string) (*Schema, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var root map[string]any
	if err := json.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Schema{root: root, res: map[string]*regexp.Regexp{}}, nil
}

// Kinds lists the kinds the schema's $defs describe (those with a const
// "kind").
func (s *Schema) Kinds() []string {
	defs, _ := s.root["$defs"].(map[string]any)
	var out []string
	for _, d := range defs {
		m, _ := d.(map[string]any)
		props, _ := m["properties"].(map[string]any)
		kind, _ := props["kind"].(map[string]any)
		if k, ok := kind["const"].(string); ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// Def returns the schema of a $defs entry, to validate against one kind.
func (s *Schema) Def(name string) (map[string]any, error) {
	return s.ref("#/$defs/" + name)
}

// Validate checks one JSON document against the whole schema.
func (s *Schema) Validate(doc []byte) error { return s.ValidateAgainst(s.root, doc) }

// ValidateAgainst checks one JSON document against sub, a part of s.
func (s *Schema) ValidateAgainst(sub map[string]any, doc []byte) error {
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if d.More() {
		return errors.New("more than one JSON document")
	}
	if err := safeNumbers(v, "$"); err != nil {
		return err
	}
	return s.check(sub, v, "$")
}

// safeNumbers refuses numbers that a JSON reader using IEEE doubles (every
// JavaScript one, jq) would round: integers beyond 2^53.
func safeNumbers(v any, at string) error {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			if i > 1<<53 || i < -(1<<53) {
				return fmt.Errorf("%s: %s is beyond 2^53: readers round it", at, x)
			}
		} else if !strings.ContainsAny(x.String(), ".eE") {
			return fmt.Errorf("%s: %s is beyond 2^53: readers round it", at, x)
		}
	case map[string]any:
		for k, e := range x {
			if err := safeNumbers(e, at+"."+k); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := safeNumbers(e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Schema) ref(r string) (map[string]any, error) {
	name, ok := strings.CutPrefix(r, "#/$defs/")
	if !ok {
		return nil, fmt.Errorf("$ref %q: only #/$defs/NAME is supported", r)
	}
	defs, _ := s.root["$defs"].(map[string]any)
	sub, ok := defs[name].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("$ref %q: no such definition", r)
	}
	return sub, nil
}

var known = map[string]bool{"$schema": true, "$id": true, "$defs": true, "title": true, "description": true,
	"$ref": true, "oneOf": true, "type": true, "const": true, "enum": true, "pattern": true, "minimum": true,
	"maximum": true, "required": true, "properties": true, "additionalProperties": true, "items": true}

func (s *Schema) check(sch map[string]any, v any, at string) error {
	keys := make([]string, 0, len(sch))
	for k := range sch {
		if !known[k] {
			return fmt.Errorf("schema keyword %q at %s is not supported by this validator", k, at)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if r, ok := sch["$ref"].(string); ok {
		sub, err := s.ref(r)
		if err != nil {
			return err
		}
		if err := s.check(sub, v, at); err != nil {
			return err
		}
	}
	if alts, ok := sch["oneOf"].([]any); ok {
		var errs []string
		n := 0
		for i, alt := range alts {
			if err := s.check(alt.(map[string]any), v, at); err != nil {
				errs = append(errs, fmt.Sprintf("[%d] %v", i, err))
			} else {
				n++
			}
		}
		if n != 1 {
			if n == 0 && len(errs) > 0 {
				// Say what the closest alternative (same kind) said.
				if kind := kindOf(v); kind != "" {
					for _, e := range errs {
						if !strings.Contains(e, ".kind:") {
							return fmt.Errorf("%s: kind %q: %s", at, kind, e)
						}
					}
				}
			}
			return fmt.Errorf("%s: matches %d of oneOf's %d alternatives, want 1: %s", at, n, len(alts), strings.Join(errs, "; "))
		}
	}
	if t, ok := sch["type"]; ok {
		if err := checkType(t, v, at); err != nil {
			return err
		}
	}
	if c, ok := sch["const"]; ok && !equal(c, v) {
		return fmt.Errorf("%s: %v, want %v", at, v, c)
	}
	if en, ok := sch["enum"].([]any); ok {
		found := false
		for _, c := range en {
			found = found || equal(c, v)
		}
		if !found {
			return fmt.Errorf("%s: %v is not one of %v", at, v, en)
		}
	}
	switch x := v.(type) {
	case string:
		if p, ok := sch["pattern"].(string); ok {
			re := s.res[p]
			if re == nil {
				var err error
				if re, err = regexp.Compile(p); err != nil {
					return fmt.Errorf("schema pattern %q: %v", p, err)
				}
				s.res[p] = re
			}
			if !re.MatchString(x) {
				return fmt.Errorf("%s: %q does not match %s", at, x, p)
			}
		}
	case json.Number:
		f, _ := x.Float64()
		if m, ok := sch["minimum"].(float64); ok && f < m {
			return fmt.Errorf("%s: %v < minimum %v", at, x, m)
		}
		if m, ok := sch["maximum"].(float64); ok && f > m {
			return fmt.Errorf("%s: %v > maximum %v", at, x, m)
		}
	case map[string]any:
		for _, r := range asList(sch["required"]) {
			if _, ok := x[r.(string)]; !ok {
				return fmt.Errorf("%s: %q is required", at, r)
			}
		}
		props, _ := sch["properties"].(map[string]any)
		names := make([]string, 0, len(x))
		for k := range x {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			if p, ok := props[k].(map[string]any); ok {
				if err := s.check(p, x[k], at+"."+k); err != nil {
					return err
				}
				continue
			}
			switch ap := sch["additionalProperties"].(type) {
			case bool:
				if !ap {
					return fmt.Errorf("%s: property %q is not in the schema", at, k)
				}
			case map[string]any:
				if err := s.check(ap, x[k], at+"."+k); err != nil {
					return err
				}
			}
		}
	case []any:
		if it, ok := sch["items"].(map[string]any); ok {
			for i, e := range x {
				if err := s.check(it, e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func kindOf(v any) string {
	if m, ok := v.(map[string]any); ok {
		k, _ := m["kind"].(string)
		return k
	}
	return ""
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func checkType(t any, v any, at string) error {
	for _, want := range append(asList(t), t) {
		name, ok := want.(string)
		if !ok {
			continue
		}
		if typeIs(name, v) {
			return nil
		}
	}
	return fmt.Errorf("%s: %s is not of type %v", at, describe(v), t)
}

func typeIs(name string, v any) bool {
	switch name {
	case "null":
		return v == nil
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		if _, err := n.Int64(); err == nil {
			return true
		}
		f, err := n.Float64()
		return err == nil && f == math.Trunc(f) && !strings.ContainsAny(n.String(), ".eE")
	}
	return false
}

func describe(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 60 {
		b = append(b[:60], "..."...)
	}
	return string(b)
}

// equal compares a schema value (from encoding/json: float64) with a
// document value (json.Number).
func equal(schema, doc any) bool {
	if n, ok := doc.(json.Number); ok {
		f, err := n.Float64()
		sf, ok := schema.(float64)
		return err == nil && ok && f == sf
	}
	return reflect.DeepEqual(schema, doc)
}
