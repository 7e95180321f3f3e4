package handlers

import (
	"math"
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	date := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{"missing", http.Header{}, 0, false},
		{"seconds", http.Header{"Retry-After": {"30"}}, 30 * time.Second, true},
		{"zero", http.Header{"Retry-After": {"0"}}, 0, false},
		{"negative", http.Header{"Retry-After": {"-5"}}, 0, false},
		{"fraction", http.Header{"Retry-After": {"1.5"}}, 0, false},
		{"huge", http.Header{"Retry-After": {"99999999999999999999999"}}, math.MaxInt64, true},
		{"date from now", http.Header{"Retry-After": {date(time.Minute)}}, time.Minute, true},
		{"date from Date header", http.Header{"Retry-After": {date(time.Hour)}, "Date": {date(50 * time.Minute)}}, 10 * time.Minute, true},
		{"bad Date header", http.Header{"Retry-After": {date(time.Minute)}, "Date": {"yesterday"}}, time.Minute, true},
		{"past date", http.Header{"Retry-After": {date(-time.Second)}}, 0, false},
		{"RFC 850 date", http.Header{"Retry-After": {now.Add(2 * time.Minute).Format(time.RFC850)}}, 2 * time.Minute, true},
		{"garbage", http.Header{"Retry-After": {"later"}}, 0, false},
	}
	for _, tt := range tests {
		got, ok := parseRetryAfter(tt.header, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: parseRetryAfter = %s, %v; want %s, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestEventHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		headers map[string]string
		want    string
	}{
		{nil, ""},
		{map[string]string{"content-type": " text/plain "}, "text/plain"},
		{map[string]string{"Content-Type": "a/b"}, "a/b"},
		{map[string]string{"CONTENT-TYPE": "x/1", "Content-Type": "x/2", "content-type": "x/3"}, "x/3"},
		{map[string]string{"CONTENT-TYPE": "x/1", "Content-Type": "x/2"}, "x/1"},
		{map[string]string{"content-typo": "x/1"}, ""},
	}
	for _, tt := range tests {
		if got := eventHeader(tt.headers, "content-type"); got != tt.want {
			t.Errorf("eventHeader(%v) = %q, want %q", tt.headers, got, tt.want)
		}
	}
}
