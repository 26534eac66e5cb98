/** One metric in Prometheus' text exposition format. */
export interface Metric {
  readonly name: string;
  readonly help: string;
  readonly type: 'counter' | 'gauge' | 'summary';
  /** Samples: a value, with labels and a name suffix (`_sum`, `_count`) where needed. */
  readonly samples: readonly {
    readonly value: number;
    readonly labels?: Readonly<Record<string, string>>;
    readonly suffix?: string;
  }[];
}

function labelText(labels: Readonly<Record<string, string>> | undefined): string {
  if (!labels || Object.keys(labels).length === 0) return '';
  const pairs = Object.entries(labels).map(
    ([k, v]) => `${k}="${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`,
  );
  return `{${pairs.join(',')}}`;
}

function valueText(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Number.POSITIVE_INFINITY) return '+Inf';
  if (value === Number.NEGATIVE_INFINITY) return '-Inf';
  return String(value);
}

/** The metrics as Prometheus text (version 0.0.4). */
export function prometheusText(metrics: readonly Metric[]): string {
  const lines: string[] = [];
  for (const m of metrics) {
    lines.push(`# HELP ${m.name} ${m.help}`, `# TYPE ${m.name} ${m.type}`);
    for (const s of m.samples)
      lines.push(`${m.name}${s.suffix ?? ''}${labelText(s.labels)} ${valueText(s.value)}`);
  }
  return `${lines.join('\n')}\n`;
}
