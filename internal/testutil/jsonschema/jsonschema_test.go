package jsonschema_test

import (
	"os"
	"strings"
	"testing"

	"github.com/xdpfab/xdpfab/internal/testutil/jsonschema"
)

const schemaPath = "../../../docs/cli-json.schema.json"

// The validator accepts what the schema describes and catches each kind of
// mistake the command could make; the schema's kinds are all in the doc.
func TestValidator(t *testing.T) {
	s, err := jsonschema.Load(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	good := []string{
		`{"schema":1,"kind":"av_straddr","straddr":"fi_sockaddr_in://1.2.3.4:5"}`,
		`{"schema":1,"kind":"av_remove","removed":["0","18446744073709551614"]}`,
		`{"schema":1,"kind":"av_list","name":"j","id":1,"type":"table","flags":[],"entries":0,"addresses":[]}`,
		`{"schema":1,"kind":"av_entry","fi_addr":"1","addr":"[2001:2::1]:5","str":"fi_sockaddr_in6://[2001:2::1]:5","user_id":null,"refs":1}`,
		`{"schema":1,"kind":"error","command":"xdpfab av insert","error":"x","errno":22,"errno_name":"EINVAL","exit_status":22,"usage":false}`,
		`{"schema":1,"kind":"error","command":"xdpfab","error":"x","errno":null,"errno_name":null,"exit_status":64,"usage":true}`,
	}
	for _, g := range good {
		if err := s.Validate([]byte(g)); err != nil {
			t.Errorf("%s: %v", g, err)
		}
	}
	bad := map[string]string{
		`{"schema":2,"kind":"av_straddr","straddr":"fi_sockaddr_in://1.2.3.4:5"}`:                                              "schema version",
		`{"schema":1,"kind":"av_remove","removed":[0]}`:                                                                        "fi_addr as a number",
		`{"schema":1,"kind":"av_remove","removed":["0x1"]}`:                                                                    "fi_addr not decimal",
		`{"schema":1,"kind":"av_remove","removed":null}`:                                                                       "null list",
		`{"schema":1,"kind":"av_list","name":"j","id":1,"type":"table","flags":[],"entries":0}`:                                "missing list",
		`{"schema":1,"kind":"av_list","name":"j","id":1,"type":"ring","flags":[],"entries":0,"addresses":[]}`:                  "bad enum",
		`{"schema":1,"kind":"av_straddr","straddr":"x","extra":1}`:                                                             "extra field",
		`{"schema":1,"kind":"stats","counters":{"rx":18446744073709551615}}`:                                                   "number past 2^53",
		`{"schema":1,"kind":"stats","counters":{"rx":1}}{"schema":1,"kind":"stats","counters":{"rx":1}}`:                       "two documents",
		`{"schema":1,"kind":"nope"}`:                                                                                           "unknown kind",
		`{"schema":1,"kind":"error","command":"xdpfab","error":"x","errno":0,"errno_name":null,"exit_status":64,"usage":true}`: "errno 0",
	}
	for b, why := range bad {
		if err := s.Validate([]byte(b)); err == nil {
			t.Errorf("%s (%s): accepted", b, why)
		}
	}
	doc, err := os.ReadFile("../../../docs/cli-json.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range s.Kinds() {
		if !strings.Contains(string(doc), "`"+k+"`") {
			t.Errorf("docs/cli-json.md does not describe kind %q", k)
		}
	}
	if len(s.Kinds()) < 14 {
		t.Errorf("kinds %v", s.Kinds())
	}
}
