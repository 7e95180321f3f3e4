package amqpconn

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxd/inboxd/internal/brokers/amqpwire"
)

// TestPropertiesAreTheWireRules: the client's table maps the properties
// amqpwire names, in its order, and refuses exactly what amqpwire refuses.
func TestPropertiesAreTheWireRules(t *testing.T) {
	t.Parallel()
	if len(Properties) != len(amqpwire.Properties) {
		t.Fatalf("%d properties mapped, amqpwire names %d", len(Properties), len(amqpwire.Properties))
	}
	for i, p := range Properties {
		if p.Header != amqpwire.Properties[i] {
			t.Errorf("property %d is %s, amqpwire says %s", i, p.Header, amqpwire.Properties[i])
		}
		for _, v := range []string{"", "text/plain", "60000", "2026-12-04T02:00:00Z", string(make([]byte, 256)), "-1"} {
			var pub amqp.Publishing
			_, wireErr := amqpwire.CheckProperty(p.Header, v)
			if err := p.Set(&pub, v); (err == nil) != (wireErr == nil) {
				t.Errorf("%s = %.20q: Set says %v, amqpwire %v", p.Header, v, err, wireErr)
			}
		}
	}
}
