package main

// Baselines: the results of runs on earlier commits, shown beside this
// run's where a design changed under the same measurements (issue 13: the
// AV's hash maps replaced by a table in shared memory; issue 15: the
// ping-pong's latency work). A baseline is a
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

// A baseline is an earlier run's results.json (trimmed to the sections it
// compares) shown beside this run's, for one change of design.
type baseline struct {
	name     string   // for -save-baseline
	file     string   // from bench/
	sections []string // what it keeps
	title    string   // what changed, for the heading
	what     string   // the commit it was measured on, for the paragraph
	before   string   // the before column's heading
	r        *results // loaded, nil if the file is missing
}

// baselines are shown in this order, each if its file exists.
var baselines = []*baseline{
	{name: "av-hashmap", file: "../docs/bench/baseline-av-hashmap.json", sections: []string{"xdp", "av"},
		title: "the AV's data structure", before: "before (hash maps)",
		what: "the commit before the AV moved from BPF hash maps to a table in shared memory (issue 13)"},
	{name: "latency", file: "../docs/bench/baseline-latency.json", sections: []string{"pp"},
		title: "ping-pong latency", before: "before (session start)",
		what: "the commit before the latency work of issue 15's second part (checksums left to the kernel, and what followed)"},
}

// loadBaselines reads every baseline whose file exists.
func loadBaselines() error {
	for _, b := range baselines {
		r, err := loadBaseline(b.file)
		if err != nil {
			return err
		}
		b.r = r
	}
	return nil
}

// baselineNamed returns the baseline called name, or nil.
func baselineNamed(name string) *baseline {
	for _, b := range baselines {
		if b.name == name {
			return b
		}
	}
	return nil
}

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

// reportBaselines writes a before-and-after section per loaded baseline.
func reportBaselines(d *doc) {
	for _, b := range baselines {
		if b.r != nil {
			reportBaseline(d, b)
		}
	}
}

// reportBaseline writes one before-and-after section.
func reportBaseline(d *doc, b *baseline) {
	base := b.r
	d.p("## Before and after: %s", b.title)
	d.p("")
	d.p("The same measurements of section(s) %s from a run on %s, started %s UTC (`%s`), beside "+
		"this run's. The two runs are different runs on the same machine: compare within a column, and read the "+
		"before/after ratio as indicative only. A key missing on one side was not measured there.",
		strings.Join(b.sections, ", "), b.what, base.Started.Format("2006-01-02 15:04"), strings.TrimPrefix(b.file, "../"))
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
	d.table([]string{"measurement", "unit", b.before, "after (this run)", "after's gain (above 1: better)"}, rows)
}
