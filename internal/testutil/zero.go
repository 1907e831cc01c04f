package testutil

import (
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// CallEveryMethod calls every exported method of v (a nil or zero-valued
// pointer, say) with zero arguments — nil slices, nil pointers, zero
// numbers, empty strings — and fails tb for each one that panics. Methods
// named in skip are left out (say, those documented to block). Each call
// gets a second; one that does not return in time fails as well.
func CallEveryMethod(tb testing.TB, v any, skip ...string) {
	tb.Helper()
	EveryMethod(tb, v, nil, skip...)
}

// EveryMethod is CallEveryMethod that also hands the results of every call
// that returned to check, when check is not nil, to judge them (and fail
// tb).
func EveryMethod(tb testing.TB, v any, check func(method string, out []reflect.Value), skip ...string) {
	tb.Helper()
	EveryMethodOf(tb, func() any { return v }, check, skip...)
}

// EveryMethodOf is EveryMethod on a value made afresh by mk for each
// method, so that one call (say, a Close) cannot change what the next one
// sees.
func EveryMethodOf(tb testing.TB, mk func() any, check func(method string, out []reflect.Value), skip ...string) {
	tb.Helper()
	rt := reflect.TypeOf(mk())
	for i := range rt.NumMethod() {
		m := rt.Method(i)
		if contains(skip, m.Name) {
			continue
		}
		rv := reflect.ValueOf(mk())
		out, ok := CallZero(tb, fmt.Sprintf("%s.%s on %s", rt, m.Name, describe(rv)), rv.Method(i))
		if ok && check != nil {
			check(m.Name, out)
		}
	}
}

// CallZero calls fn, a func value, with zero arguments (a variadic
// parameter gets none) and returns its results. ok is false, and tb has
// failed naming the call name, when fn panicked or did not return within a
// second.
func CallZero(tb testing.TB, name string, fn reflect.Value) (out []reflect.Value, ok bool) {
	tb.Helper()
	ft := fn.Type()
	args := make([]reflect.Value, ft.NumIn())
	for j := range args {
		args[j] = reflect.Zero(ft.In(j))
	}
	if ft.IsVariadic() {
		args = args[:len(args)-1]
	}
	type result struct {
		out   []reflect.Value
		panic string
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- result{panic: fmt.Sprintf("%v\n%s", r, debug.Stack())}
			}
		}()
		done <- result{out: fn.Call(args)}
	}()
	select {
	case r := <-done:
		if r.panic != "" {
			tb.Errorf("%s panicked: %s", name, r.panic)
			return nil, false
		}
		return r.out, true
	case <-time.After(time.Second):
		tb.Errorf("%s did not return within a second", name)
		return nil, false
	}
}

// LastError returns the last of out when the call's last result is an
// error; has is false when it has no error result.
func LastError(out []reflect.Value) (err error, has bool) {
	if len(out) == 0 {
		return nil, false
	}
	last := out[len(out)-1]
	if last.Type() != reflect.TypeFor[error]() {
		return nil, false
	}
	err, _ = last.Interface().(error)
	return err, true
}

func describe(v reflect.Value) string {
	if v.Kind() == reflect.Pointer && v.IsNil() {
		return "a nil pointer"
	}
	return "a zero value"
}

func contains(s []string, x string) bool {
	for _, e := range s {
		if strings.EqualFold(e, x) {
			return true
		}
	}
	return false
}
