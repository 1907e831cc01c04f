package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"time"
)

// measurement is one quantity measured reps times.
type measurement struct {
	Section string            `json:"section"`
	Key     string            `json:"key"`
	Unit    string            `json:"unit"`
	Labels  map[string]string `json:"labels,omitempty"`
	Values  []float64         `json:"values"`
	Median  float64           `json:"median"`
	Min     float64           `json:"min"`
	Max     float64           `json:"max"`
	Note    string            `json:"note,omitempty"`
	// Extra holds side numbers of the measurement (offered load, drops).
	Extra map[string]float64 `json:"extra,omitempty"`
}

// results is everything one run produced; it is written as JSON.
type results struct {
	Started      time.Time           `json:"started"`
	Finished     time.Time           `json:"finished"`
	Quick        bool                `json:"quick"`
	Reps         int                 `json:"reps"`
	Setup        map[string]string   `json:"setup"`
	SectionTimes map[string]float64  `json:"section_seconds"`
	Skipped      map[string]string   `json:"skipped,omitempty"`
	Measurements []*measurement      `json:"measurements"`
	Notes        map[string][]string `json:"notes,omitempty"`
	byKey        map[string]*measurement
}

func newResults(quick bool, reps int) *results {
	return &results{Started: time.Now().UTC(), Quick: quick, Reps: reps, Setup: map[string]string{},
		SectionTimes: map[string]float64{}, Skipped: map[string]string{}, Notes: map[string][]string{},
		byKey: map[string]*measurement{}}
}

// add records a measurement; values are per repetition.
func (r *results) add(section, key, unit string, values []float64, labels map[string]string) *measurement {
	m := &measurement{Section: section, Key: key, Unit: unit, Labels: labels, Values: values}
	m.Median, m.Min, m.Max = summarize(values)
	if old, ok := r.byKey[key]; ok {
		*old = *m
		return old
	}
	r.Measurements = append(r.Measurements, m)
	r.byKey[key] = m
	return m
}

// get returns the measurement key, or nil.
func (r *results) get(key string) *measurement { return r.byKey[key] }

func (r *results) note(section, format string, args ...any) {
	r.Notes[section] = append(r.Notes[section], fmt.Sprintf(format, args...))
}

func summarize(v []float64) (med, lo, hi float64) {
	if len(v) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		med = s[n/2]
	} else {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}

// percentile of sorted durations, q in [0,1].
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func (r *results) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// reps runs fn n times and returns the values.
func reps(n int, fn func(i int) (float64, error)) ([]float64, error) {
	out := make([]float64, 0, n)
	for i := range n {
		v, err := fn(i)
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
	return out, nil
}
