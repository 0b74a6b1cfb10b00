// Package a2awire is the A2A v1.0.1 wire format of Channels: the ProtoJSON shapes of tasks,
// messages, stream events, requests and the agent card; request decoding with explicit limits;
// the conversion between those shapes and the task plane's domain types; and the table of
// protocol errors with their HTTP, gRPC and JSON-RPC codes.
//
// Wire JSON exists only at the edge. The bindings (a2ahttp, a2ajsonrpc) decode a request with a
// Decode function, hand the result to the shared service (a2aservice), which works on
// taskplane types and converts its answers back with the From* functions.
//
// Decoding follows ProtoJSON: members are looked up by their lowerCamelCase name and, failing
// that, by the original snake_case proto name; enums accept the full proto name or its number;
// int32 accepts a number or a quoted number; bytes accept standard and URL-safe base64; a JSON
// null is the same as an absent member; unknown members are ignored. REQUIRED fields are
// checked and reported as InvalidParams with a google.rpc.BadRequest field violation.
package a2awire
