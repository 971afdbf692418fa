// SINGA's keyed graph calls, as a thin registry of owned graphs: per device, graphs by key, and
// the options given to the graphs EnableGraph creates. Python spells them dev.EnableGraph,
// dev.RunGraph, dev.ResetGraph and SINGA's older SetBufferFlag / ExecBuffOps (swig/device.i).
//
//   EnableGraph(*dev, true);            // start buffering into graph "default" (replacing one)
//   Tensor loss = TrainStep(...);       // recorded, not run
//   EnableGraph(*dev, false);           // stop: passes, analysis, plan, schedule
//   for (...) RunGraph(*dev);           // replay
//
// A graph from here lives until ResetGraph (or the process ends); a replay holds its own
// reference, so ResetGraph from another thread never pulls a graph from under a running replay.
// Code that owns its graphs (CapturedStep, Model) uses Graph directly instead.
#pragma once

#include <memory>
#include <string>

#include "graph/graph.h"

namespace loom {

void EnableGraph(Device& device, bool on, const std::string& key = "default");
void RunGraph(Device& device, bool sequential = true, const std::string& key = "default");
void ResetGraph(Device& device, const std::string& key = "");  // "": every graph of the device
bool HasGraph(Device& device, const std::string& key = "default");
std::shared_ptr<Graph> GetGraph(Device& device, const std::string& key = "default");
// The options EnableGraph gives the graphs it creates on `device` from now on.
GraphOptions RegistryGraphOptions(Device& device);
void SetRegistryGraphOptions(Device& device, const GraphOptions& options);

}  // namespace loom
