/// \file disco/disco.h
/// \brief Umbrella header: everything a disco controller program needs.
#ifndef DISCO_DISCO_H_
#define DISCO_DISCO_H_

#include <disco/any.h>
#include <disco/config.h>
#include <disco/error.h>
#include <disco/files.h>
#include <disco/function.h>
#include <disco/graph.h>
#include <disco/h5.h>
#include <disco/half.h>
#include <disco/log.h>
#include <disco/remote.h>
#include <disco/session.h>
#include <disco/tensor.h>
#include <disco/types.h>
#include <disco/worker.h>

#endif  // DISCO_DISCO_H_
