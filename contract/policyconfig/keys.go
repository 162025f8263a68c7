package policyconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// checkKeys enforces what encoding/json does not: object keys must match the
// fields' JSON names exactly, in case too. A payload is written by the
// controllers only, so any other spelling is a forgery or a bug.
func checkKeys(raw []byte, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	trimmed := bytes.TrimSpace(raw)
	if bytes.Equal(trimmed, []byte("null")) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		if t == reflect.TypeFor[Duration]() {
			return nil
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(trimmed, &obj); err != nil {
			return nil // the decoder reports the type error with more context
		}
		fields := map[string]reflect.Type{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields[name] = f.Type
		}
		for key, val := range obj {
			ft, ok := fields[key]
			if !ok {
				return &ParseError{Field: join(path, key), Reason: "unknown field (names are case-sensitive)"}
			}
			if err := checkKeys(val, ft, join(path, key)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		var items []json.RawMessage
		if err := json.Unmarshal(trimmed, &items); err != nil {
			return nil
		}
		for i, item := range items {
			if err := checkKeys(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
