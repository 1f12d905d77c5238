// libreclaim for embedders: every header a program that loads models with
// reclaim needs (find_package(reclaim), target reclaim::reclaim).
//
//   reclaim::Runtime runtime;                    // llama.cpp's backends, once
//   reclaim::Scope app("app");                   // everything below is released with it
//   reclaim::Model model(load, &app);            // on the ledger under app/model:NAME
//   reclaim::Session session(model, options);    // a context, under the model's scope
//   reclaim::generate(session, request);
//   model.unload();                              // sessions first, then the weights
//   reclaim::Ledger::process().entries();        // what is held, by owner
#pragma once

#include "core/cancel.h"
#include "core/error.h"
#include "core/heap.h"
#include "core/ledger.h"
#include "core/scope.h"
#include "core/thresholds.h"
#include "core/usage.h"
#include "engine/embed.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "engine/llama_runtime.h"
#include "engine/session.h"
#include "engine/test_model.h"
#include "runtime/registry.h"
