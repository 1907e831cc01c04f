package main

// A baseline: the results of a run on an earlier commit, shown beside this
// run's where a design changed under the same measurements (issue 13: the
// AV's hash maps replaced by a table in shared memory). The baseline is a
// results.json that make bench wrote there, trimmed to the sections it
// compares; its numbers are from another run, so their ratios to this
// run's are across runs and only indicative (the tables say so).

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
)

// baselineFile is where the bench looks for the baseline, from bench/.
const baselineFile = "../docs/bench/baseline-av-hashmap.json"

// loadBaseline reads the baseline, nil if there is none.
func loadBaseline(path string) (*results, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("baseline %s: %w", path, err)
	}
	return &r, nil
}

// saveBaseline writes the sections of r that a later design is compared
// on (for -save-baseline).
func saveBaseline(r *results, path string, sections []string) error {
	out := *r
	out.Measurements = nil
	for _, m := range r.Measurements {
		if slices.Contains(sections, m.Section) {
			out.Measurements = append(out.Measurements, m)
		}
	}
	b, err := json.MarshalIndent(&out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// reportBaseline writes the before-and-after section when a baseline was
// loaded.
func reportBaseline(d *doc, base *results) {
	if base == nil {
		return
	}
	d.p("## Before and after: the AV's data structure")
	d.p("")
	d.p("The same measurements of sections 1 and 4 from a full run on the commit before the AV moved from BPF hash "+
		"maps to a table in shared memory (issue 13), started %s UTC (`docs/bench/baseline-av-hashmap.json`), beside "+
		"this run's. The two runs are different runs on the same machine: compare within a column, and read the "+
		"before/after ratio as indicative only. A key missing on one side was not measured there.",
		base.Started.Format("2006-01-02 15:04"))
	d.p("")
	var rows [][]string
	for _, m := range base.Measurements {
		now := d.r.byKey[m.Key]
		after, ratio := "n/a", "n/a"
		if now != nil {
			after = fmt.Sprintf("%.4g", now.Median)
			// Oriented like the rest of the report: above 1, the
			// change did better (a rate up, or a time or size down).
			switch {
			case strings.HasSuffix(m.Unit, "/s") && m.Median != 0:
				ratio = fmt.Sprintf("%.2f", now.Median/m.Median)
			case !strings.HasSuffix(m.Unit, "/s") && now.Median != 0:
				ratio = fmt.Sprintf("%.2f", m.Median/now.Median)
			}
		}
		rows = append(rows, []string{"`" + m.Key + "`", m.Unit, fmt.Sprintf("%.4g", m.Median), after, ratio})
	}
	d.table([]string{"measurement", "unit", "before (hash maps)", "after (this run)", "after's gain (above 1: better)"}, rows)
}
