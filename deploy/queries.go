package deploy

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"gopkg.in/yaml.v3"
)

// The monitoring files shipped in this directory, embedded so that a test
// elsewhere (one that scrapes a running daemon) can check them.
var (
	//go:embed prometheus/inboxd-rules.yaml
	embeddedRules []byte
	//go:embed kubernetes/prometheusrule.yaml
	embeddedPrometheusRule []byte
	//go:embed grafana/inboxd-dashboard.json
	embeddedDashboard []byte
)

// QueriedMetrics returns the sorted, de-duplicated names of the metrics that
// the alert rules (deploy/prometheus/inboxd-rules.yaml) and the Grafana
// dashboard (deploy/grafana/inboxd-dashboard.json: every panel target and the
// template variables' label_values/query_result queries) query.
//
// Every expression is parsed as PromQL. A histogram's series are reported
// under the histogram's name: a trailing _bucket, _sum or _count is removed.
// The list includes up, which Prometheus records itself and /metrics does not
// expose. An expression that does not parse, or a selector without a metric
// name, is an error naming the rule or panel.
func QueriedMetrics() ([]string, error) {
	exprs, err := queriedExprs()
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, q := range exprs {
		names, err := metricNames(q.expr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q.where, err)
		}
		for _, n := range names {
			set[normaliseMetricName(n)] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// namedExpr is one PromQL expression and where it was found.
type namedExpr struct {
	where string // e.g. `rule InboxdDown` or `panel "Throughput" target A`
	expr  string // PromQL, Grafana's interval variables already replaced
}

// queriedExprs collects every PromQL expression of the rules and the dashboard.
func queriedExprs() ([]namedExpr, error) {
	rf, err := parseRuleFile(embeddedRules)
	if err != nil {
		return nil, fmt.Errorf("prometheus/inboxd-rules.yaml: %w", err)
	}
	var out []namedExpr
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			out = append(out, namedExpr{where: "prometheus/inboxd-rules.yaml: rule " + name, expr: r.Expr})
		}
	}
	dq, err := dashboardExprs(embeddedDashboard)
	if err != nil {
		return nil, fmt.Errorf("grafana/inboxd-dashboard.json: %w", err)
	}
	for _, q := range dq {
		q.where = "grafana/inboxd-dashboard.json: " + q.where
		out = append(out, q)
	}
	return out, nil
}

// promRuleFile is the part of a Prometheus rules file that the checks read.
type promRuleFile struct {
	Groups []promRuleGroup `yaml:"groups"`
}

// promRuleGroup is one rule group.
type promRuleGroup struct {
	Name  string     `yaml:"name"`
	Rules []promRule `yaml:"rules"`
}

// promRule is one alerting or recording rule.
type promRule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// parseRuleFile parses a Prometheus rules file strictly (unknown fields are errors).
func parseRuleFile(b []byte) (*promRuleFile, error) {
	var rf promRuleFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		return nil, err
	}
	if len(rf.Groups) == 0 {
		return nil, fmt.Errorf("no rule groups")
	}
	return &rf, nil
}

// grafanaDashboard is the part of a Grafana dashboard model that the checks read.
type grafanaDashboard struct {
	Title      string         `json:"title"`
	UID        string         `json:"uid"`
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []grafanaVariable `json:"list"`
	} `json:"templating"`
}

// grafanaPanel is a panel; rows carry their (collapsed) panels in Panels.
type grafanaPanel struct {
	ID         int                `json:"id"`
	Type       string             `json:"type"`
	Title      string             `json:"title"`
	Datasource *grafanaDatasource `json:"datasource"`
	GridPos    struct {
		H int `json:"h"`
		W int `json:"w"`
		X int `json:"x"`
		Y int `json:"y"`
	} `json:"gridPos"`
	Targets []grafanaTarget `json:"targets"`
	Panels  []grafanaPanel  `json:"panels"`
}

// grafanaTarget is one query of a panel.
type grafanaTarget struct {
	RefID      string             `json:"refId"`
	Expr       string             `json:"expr"`
	Datasource *grafanaDatasource `json:"datasource"`
}

// grafanaDatasource is a data source reference.
type grafanaDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// grafanaVariable is a template variable. Query is a string in older
// dashboards and {"query": "…"} in newer ones.
type grafanaVariable struct {
	Name       string             `json:"name"`
	Type       string             `json:"type"`
	Query      json.RawMessage    `json:"query"`
	Datasource *grafanaDatasource `json:"datasource"`
}

// parseDashboard parses a dashboard's JSON model.
func parseDashboard(b []byte) (*grafanaDashboard, error) {
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	if len(d.Panels) == 0 {
		return nil, fmt.Errorf("no panels")
	}
	return &d, nil
}

// allPanels returns the dashboard's panels, those nested in rows included, rows last.
func (d *grafanaDashboard) allPanels() []grafanaPanel {
	var out, rows []grafanaPanel
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if p.Type == "row" {
				rows = append(rows, p)
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return append(out, rows...)
}

// grafanaIntervalVar matches Grafana's built-in interval variables, which
// stand unquoted where PromQL expects a duration.
var grafanaIntervalVar = regexp.MustCompile(`\$\{__(?:rate_interval|interval|range)\}|\$__(?:rate_interval|interval|range)\b|\[\[__(?:rate_interval|interval|range)\]\]`)

// labelValuesQuery matches a label_values(selector, label) variable query.
var labelValuesQuery = regexp.MustCompile(`^\s*label_values\(\s*(.+)\s*,\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

// queryResultQuery matches a query_result(expr) variable query.
var queryResultQuery = regexp.MustCompile(`^\s*query_result\(\s*(.+)\s*\)\s*$`)

// dashboardExprs returns the PromQL of every panel target and of the
// template variables that query Prometheus.
func dashboardExprs(b []byte) ([]namedExpr, error) {
	d, err := parseDashboard(b)
	if err != nil {
		return nil, err
	}
	var out []namedExpr
	for _, p := range d.allPanels() {
		for _, t := range p.Targets {
			if strings.TrimSpace(t.Expr) == "" {
				return nil, fmt.Errorf("panel %q target %s: empty expr", p.Title, t.RefID)
			}
			out = append(out, namedExpr{
				where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID),
				expr:  grafanaIntervalVar.ReplaceAllString(t.Expr, "5m"),
			})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := variableQuery(v.Query)
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		var expr string
		if m := labelValuesQuery.FindStringSubmatch(q); m != nil {
			expr = m[1]
		} else if m := queryResultQuery.FindStringSubmatch(q); m != nil {
			expr = m[1]
		} else {
			continue // label_values(label), label_names(), metrics(…): no metric queried
		}
		out = append(out, namedExpr{
			where: "variable " + v.Name,
			expr:  grafanaIntervalVar.ReplaceAllString(expr, "5m"),
		})
	}
	return out, nil
}

// variableQuery returns a template variable's query string from either form.
func variableQuery(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("query is neither a string nor {\"query\": …}: %w", err)
	}
	return obj.Query, nil
}

// metricNames parses expr as PromQL and returns the metric names its
// selectors name.
func metricNames(expr string) ([]string, error) {
	node, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	var bad error
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == "__name__" && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
		}
		if name == "" && bad == nil {
			bad = fmt.Errorf("selector %s names no metric", vs.String())
		}
		if name != "" {
			names = append(names, name)
		}
		return nil
	})
	if bad != nil {
		return nil, bad
	}
	return names, nil
}

// normaliseMetricName maps a histogram's (or summary's) series names to the
// metric's own name.
func normaliseMetricName(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && base != "" {
			return base
		}
	}
	return name
}
