// Gantt charts of a simulated pipeline schedule: text (one row per rank and kind of work, time in
// forward times) and PNG (one row per rank, forwards and backwards in two colours, chunks in
// shades).
#pragma once
#include <string>

#include "src/pipeline/schedule.hpp"

namespace mpitron::pipeline {

// The chart, wrapped into blocks of at most ~150 time columns, then a summary: schedule, pp, m, V,
// makespan, simulated and theoretical bubble, peak activations in flight per rank. One column is
// 1/columns_per_unit of a forward time. For a failed simulation: the summary and its error.
std::string schedule_timeline_text(const ScheduleSpec& spec, const SimulationResult& result,
                                   int columns_per_unit = 1);

// Writes the chart as an RGB PNG; UsageError naming the path if it cannot be written.
// std::invalid_argument for a failed simulation (there is no timeline to draw).
void write_schedule_png(const std::string& path, const ScheduleSpec& spec,
                        const SimulationResult& result);

}  // namespace mpitron::pipeline
