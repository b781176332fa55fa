// A time-series chart: uPlot in a Preact component. uPlot draws; this only hands it data and
// keeps its width equal to its box's (it does not resize by itself).

import {useEffect, useRef} from 'preact/hooks';
import uPlot from 'uplot';

export const PALETTE = ['#4e9af1', '#f28e2b', '#59a14f', '#e15759', '#b07aa1', '#76b7b2',
                        '#edc948', '#ff9da7'];

// times: Unix seconds; series: [{label, values}] with null where a reading is absent.
// yRange: [min, max] to pin the axis (percentages), or omitted to fit the data.
export function TimeChart({title, unit, times, series, yRange, testId}) {
  const box = useRef(null);
  const plot = useRef(null);
  const shape = series.map((s) => s.label).join('|') + `|${unit}`;
  const points = times.length;

  useEffect(() => {
    const el = box.current;
    const opts = {
      title,
      width: Math.max(200, el.clientWidth),
      height: 200,
      cursor: {drag: {x: false, y: false}},
      legend: {live: true},
      scales: {x: {time: true}, y: yRange ? {range: () => yRange} : {}},
      axes: [
        {stroke: '#9aa4b2', grid: {stroke: '#2a3140'}},
        {stroke: '#9aa4b2', grid: {stroke: '#2a3140'}, size: 70,
         values: (u, ticks) => ticks.map((v) => `${v}${unit ? ' ' + unit : ''}`)},
      ],
      series: [{}, ...series.map((s, i) => ({
        label: s.label, stroke: PALETTE[i % PALETTE.length], width: 1.5, spanGaps: false,
        value: (u, v) => (v == null ? '—' : `${v.toFixed(1)}${unit ? ' ' + unit : ''}`),
      }))],
    };
    plot.current = new uPlot(opts, [times, ...series.map((s) => s.values)], el);
    const observer = new ResizeObserver(() => {
      if (plot.current) plot.current.setSize({width: Math.max(200, el.clientWidth), height: 200});
    });
    observer.observe(el);
    return () => {
      observer.disconnect();
      plot.current.destroy();
      plot.current = null;
    };
  }, [shape, title]);

  useEffect(() => {
    if (plot.current) plot.current.setData([times, ...series.map((s) => s.values)]);
  }, [times, series]);

  return <div class="chart" ref={box} data-testid={testId} data-points={points} />;
}
