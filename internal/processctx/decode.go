package processctx

import (
	"fmt"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// ProcessContext's fields (opentelemetry.proto.processcontext.v1development,
// which no released Go module carries yet): its parts are decoded with the
// released resource and common messages.
const (
	fieldResource   protowire.Number = 1
	fieldAttributes protowire.Number = 2
)

// MaxAttributes bounds the attributes taken from one context.
const MaxAttributes = 128

// Decode decodes a ProcessContext payload. Attribute values that are no
// string, bool, integer, double or array of strings are left out.
func Decode(payload []byte) (Context, error) {
	c := Context{Resource: map[string]any{}, Attributes: map[string]any{}}
	for len(payload) > 0 {
		num, typ, n := protowire.ConsumeTag(payload)
		if n < 0 {
			return c, fmt.Errorf("%w: %v", ErrPayload, protowire.ParseError(n))
		}
		payload = payload[n:]
		if typ != protowire.BytesType || (num != fieldResource && num != fieldAttributes) {
			n = protowire.ConsumeFieldValue(num, typ, payload)
			if n < 0 {
				return c, fmt.Errorf("%w: field %d: %v", ErrPayload, num, protowire.ParseError(n))
			}
			payload = payload[n:]
			continue
		}
		b, n := protowire.ConsumeBytes(payload)
		if n < 0 {
			return c, fmt.Errorf("%w: field %d: %v", ErrPayload, num, protowire.ParseError(n))
		}
		payload = payload[n:]
		if num == fieldResource {
			r := &resourcepb.Resource{}
			if err := proto.Unmarshal(b, r); err != nil {
				return c, fmt.Errorf("%w: resource: %v", ErrPayload, err)
			}
			for _, kv := range r.GetAttributes() {
				put(c.Resource, kv)
			}
			continue
		}
		kv := &commonpb.KeyValue{}
		if err := proto.Unmarshal(b, kv); err != nil {
			return c, fmt.Errorf("%w: attribute: %v", ErrPayload, err)
		}
		put(c.Attributes, kv)
	}
	return c, nil
}

// put adds kv to attrs when its value has a type samples carry.
func put(attrs map[string]any, kv *commonpb.KeyValue) {
	if kv.GetKey() == "" || len(attrs) >= MaxAttributes {
		return
	}
	if v, ok := value(kv.GetValue()); ok {
		attrs[kv.GetKey()] = v
	}
}

func value(v *commonpb.AnyValue) (any, bool) {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue, true
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue, true
	case *commonpb.AnyValue_IntValue:
		return x.IntValue, true
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue, true
	case *commonpb.AnyValue_ArrayValue:
		var out []string
		for _, e := range x.ArrayValue.GetValues() {
			s, ok := e.GetValue().(*commonpb.AnyValue_StringValue)
			if !ok {
				return nil, false
			}
			out = append(out, s.StringValue)
		}
		return out, true
	}
	return nil, false
}
