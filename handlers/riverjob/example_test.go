package riverjob_test

import (
	"encoding/json"
	"fmt"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/handlers/riverjob"
)

// The args of two jobs: one for a JSON payload, one for a binary payload
// without a key.
func ExampleNewEventArgs() {
	for _, ev := range []*handlers.Event{
		{EventID: "pay-42", EventType: "payment.captured", Source: "payments", Key: []byte("order-7"), Payload: []byte(`{"amount": 10}`)},
		{EventID: "pay-43", EventType: "payment.captured", Source: "payments", Payload: []byte{0, 1, 2, 0xff}},
	} {
		b, err := json.Marshal(riverjob.NewEventArgs(ev))
		if err != nil {
			panic(err)
		}
		fmt.Println(string(b))
	}
	// Output:
	// {"event_id":"pay-42","event_type":"payment.captured","source":"payments","key":"b3JkZXItNw==","payload":{"amount":10}}
	// {"event_id":"pay-43","event_type":"payment.captured","source":"payments","key":null,"payload_base64":"AAEC/w=="}
}
