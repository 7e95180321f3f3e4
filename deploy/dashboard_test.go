package deploy

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// dashContractMetrics are the metrics the daemon promises for monitoring;
// the dashboard queries every one of them.
var dashContractMetrics = []string{
	"inboxd_build_info",
	"inboxd_inbox_oldest_ready_age_seconds",
	"inboxd_inbox_oldest_received_age_seconds",
	"inboxd_inbox_rows",
	"inboxd_inbox_stale_rows",
	"inboxd_ingest_consumer_lag",
	"inboxd_ingest_duplicates_total",
	"inboxd_ingest_messages_fetched_total",
	"inboxd_ingest_ready",
	"inboxd_ingest_rejected_total",
	"inboxd_ingest_rows_inserted_total",
	"inboxd_ordered_blocked_keys",
	"inboxd_outbox_broker_up",
	"inboxd_outbox_dead_rows",
	"inboxd_outbox_dead_total",
	"inboxd_outbox_deleted_total",
	"inboxd_outbox_failed_total",
	"inboxd_outbox_fenced_total",
	"inboxd_outbox_lease_lost_total",
	"inboxd_outbox_oldest_pending_seconds",
	"inboxd_outbox_pending_rows",
	"inboxd_outbox_publish_latency_seconds",
	"inboxd_outbox_published_total",
	"inboxd_outbox_shards_owned",
	"inboxd_retention_deleted_rows_total",
	"inboxd_retention_last_success_timestamp_seconds",
	"inboxd_retention_run_duration_seconds",
	"inboxd_worker_completed_total",
	"inboxd_worker_fenced_total",
	"inboxd_worker_handler_duration_seconds",
	"inboxd_worker_lease_lost_total",
	"inboxd_worker_outcome_write_delay_seconds",
	"inboxd_worker_rescued_total",
	"up",
}

// dashDatasourceUID is the data source every panel and query uses: the
// dashboard's template variable, so the dashboard imports into any Grafana.
const dashDatasourceUID = "${datasource}"

// TestDashboardJSON checks the dashboard's structure: valid JSON, a
// Prometheus data source variable used by every panel and query, unique
// panel ids, and a grid of 24 columns without overlapping panels.
func TestDashboardJSON(t *testing.T) {
	if !json.Valid(embeddedDashboard) {
		t.Fatal("grafana/inboxd-dashboard.json is not valid JSON")
	}
	d, err := parseDashboard(embeddedDashboard)
	if err != nil {
		t.Fatal(err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: both must be set", d.Title, d.UID)
	}
	var dsVar bool
	for _, v := range d.Templating.List {
		if v.Name == "datasource" {
			q, _ := variableQuery(v.Query)
			dsVar = v.Type == "datasource" && q == "prometheus"
		}
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != dashDatasourceUID) {
			t.Errorf("variable %s: datasource %+v, want uid %s", v.Name, v.Datasource, dashDatasourceUID)
		}
	}
	if !dsVar {
		t.Error(`no template variable "datasource" of type datasource querying prometheus`)
	}

	ids := map[int]string{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	panels := d.allPanels()
	var graphs int
	for _, p := range panels {
		if prev, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("panel %q: id %d is zero or also used by %q", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v is outside the 24-column grid", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Errorf("panel %q overlaps %q at (%d,%d)", p.Title, other, x, y)
					x, y = g.X+g.W, g.Y+g.H // one report per pair is enough
					continue
				}
				taken[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		graphs++
		if p.Datasource == nil || p.Datasource.UID != dashDatasourceUID || p.Datasource.Type != "prometheus" {
			t.Errorf("panel %q: datasource %+v, want {type: prometheus, uid: %s}", p.Title, p.Datasource, dashDatasourceUID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource != nil && tg.Datasource.UID != dashDatasourceUID {
				t.Errorf("panel %q target %s: datasource uid %q, want %s", p.Title, tg.RefID, tg.Datasource.UID, dashDatasourceUID)
			}
		}
	}
	if graphs < 10 {
		t.Errorf("only %d panels", graphs)
	}
	// A data source hard-coded anywhere (an exported dashboard's "uid": "P1809F7CD0C75ACF3") breaks imports.
	var generic any
	if err := json.Unmarshal(embeddedDashboard, &generic); err != nil {
		t.Fatal(err)
	}
	dashWalk(generic, func(path string, v map[string]any) {
		ds, ok := v["datasource"].(map[string]any)
		if !ok {
			return
		}
		if uid, _ := ds["uid"].(string); uid != dashDatasourceUID && uid != "-- Grafana --" {
			t.Errorf("%s: datasource uid %q, want %s", path, uid, dashDatasourceUID)
		}
	})
}

// dashWalk calls f for every JSON object under v, with a path for messages.
func dashWalk(v any, f func(path string, obj map[string]any)) {
	var walk func(string, any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			f(path, v)
			for k, c := range v {
				walk(path+"."+k, c)
			}
		case []any:
			for i, c := range v {
				walk(path+"["+strconv.Itoa(i)+"]", c)
			}
		}
	}
	walk("$", v)
}

// TestDashboardCoversContract checks that the dashboard alone queries every
// metric of the monitoring contract.
func TestDashboardCoversContract(t *testing.T) {
	exprs, err := dashboardExprs(embeddedDashboard)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, q := range exprs {
		names, err := metricNames(q.expr)
		if err != nil {
			t.Fatalf("%s: %v", q.where, err)
		}
		for _, n := range names {
			got[normaliseMetricName(n)] = true
		}
	}
	for _, m := range dashContractMetrics {
		if !got[m] {
			t.Errorf("the dashboard does not query %s", m)
		}
	}
}

// TestQueriedMetrics checks the list a scraping test compares with /metrics.
func TestQueriedMetrics(t *testing.T) {
	got, err := QueriedMetrics()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Fatal("QueriedMetrics returned nothing")
	}
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Errorf("not sorted and unique: %q", got)
	}
	for _, m := range dashContractMetrics {
		if !slices.Contains(got, m) {
			t.Errorf("%s is missing", m)
		}
	}
	for _, m := range got {
		if m != "up" && !strings.HasPrefix(m, "inboxd_") {
			t.Errorf("%s is neither up nor an inboxd metric", m)
		}
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if strings.HasSuffix(m, s) {
				t.Errorf("%s: histogram series name not normalised", m)
			}
		}
	}
	t.Logf("%d metrics: %s", len(got), strings.Join(got, " "))
}

// TestQueriedMetricsParsing checks metric name extraction on its own.
func TestQueriedMetricsParsing(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`absent(up{job="inboxd"} == 1)`, []string{"up"}},
		{`histogram_quantile(0.99, sum by (le) (rate(inboxd_worker_handler_duration_seconds_bucket[5m])))`,
			[]string{"inboxd_worker_handler_duration_seconds_bucket"}},
		{`deriv(sum(inboxd_ingest_consumer_lag)[10m:1m]) > 0 and on() {__name__="inboxd_ingest_ready"}`,
			[]string{"inboxd_ingest_consumer_lag", "inboxd_ingest_ready"}},
		{`time() - 3`, nil},
	} {
		got, err := metricNames(tc.expr)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.expr, got, tc.want)
		}
	}
	for _, bad := range []string{`sum(rate(inboxd_x_total[$__rate_interval]))`, `{job="inboxd"}`, `rate(inboxd_x[5m]`} {
		if got, err := metricNames(bad); err == nil {
			t.Errorf("%s: no error, got %q", bad, got)
		}
	}
	for in, want := range map[string]string{
		"inboxd_worker_handler_duration_seconds_bucket": "inboxd_worker_handler_duration_seconds",
		"inboxd_retention_run_duration_seconds_sum":     "inboxd_retention_run_duration_seconds",
		"inboxd_retention_run_duration_seconds_count":   "inboxd_retention_run_duration_seconds",
		"inboxd_worker_completed_total":                 "inboxd_worker_completed_total",
		"up":                                            "up",
	} {
		if got := normaliseMetricName(in); got != want {
			t.Errorf("normaliseMetricName(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestQueriedMetricsDashboardExprs checks the dashboard side: interval
// variables are replaced, nested row panels and variable queries are read,
// and an unparsable panel query is an error naming the panel.
func TestQueriedMetricsDashboardExprs(t *testing.T) {
	dash := `{"panels": [
	  {"type": "row", "title": "r", "panels": [
	    {"type": "timeseries", "title": "nested", "targets": [{"refId": "A", "expr": "rate(inboxd_a_total{job=\"$job\"}[$__rate_interval])"}]}
	  ]},
	  {"type": "stat", "title": "top", "targets": [{"refId": "B", "expr": "sum(rate(inboxd_b_total[${__interval}]))"}]}
	],
	"templating": {"list": [
	  {"name": "job", "type": "query", "query": {"query": "label_values(inboxd_build_info{x=\"y\"}, job)"}},
	  {"name": "old", "type": "query", "query": "query_result(topk(1, inboxd_c))"},
	  {"name": "lbl", "type": "query", "query": "label_values(job)"},
	  {"name": "datasource", "type": "datasource", "query": "prometheus"}
	]}}`
	exprs, err := dashboardExprs([]byte(dash))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, q := range exprs {
		n, err := metricNames(q.expr)
		if err != nil {
			t.Fatalf("%s (%s): %v", q.where, q.expr, err)
		}
		names = append(names, n...)
	}
	slices.Sort(names)
	if want := []string{"inboxd_a_total", "inboxd_b_total", "inboxd_build_info", "inboxd_c"}; !reflect.DeepEqual(names, want) {
		t.Errorf("names %q, want %q", names, want)
	}

	broken := strings.Replace(dash, `[${__interval}]`, `[`, 1)
	exprs, err = dashboardExprs([]byte(broken))
	if err != nil {
		t.Fatal(err)
	}
	var failed bool
	for _, q := range exprs {
		if _, err := metricNames(q.expr); err != nil {
			failed = true
			if !strings.Contains(q.where, `panel "top"`) {
				t.Errorf("error located at %s, want panel \"top\"", q.where)
			}
		}
	}
	if !failed {
		t.Error("a broken panel query parsed")
	}
}
